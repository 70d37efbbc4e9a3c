#include "net/receive_queue.h"

#include <sys/epoll.h>

#include <boost/asio/detail/reactor.hpp>
#include <boost/version.hpp>
#include <cstdint>
#include <type_traits>

namespace warden {
namespace asio = boost::asio;

#if BOOST_VERSION == 108100 && defined(BOOST_ASIO_HAS_EPOLL) && \
    !defined(BOOST_ASIO_HAS_IO_URING_AS_DEFAULT)

namespace {

using Reactor = asio::detail::epoll_reactor;
using DescriptorState = Reactor::descriptor_state;
using Mutex = asio::detail::conditionally_enabled_mutex;
static_assert(std::is_same_v<asio::detail::reactor, Reactor>);

// The members used here are private. An explicit instantiation may name private members
// ([temp.spec.general]/6), which is how their pointers are taken: each Tag's MemberOf returns one.
template <typename Tag, auto kMember>
struct ExposeMember {
  friend decltype(kMember) MemberOf(Tag) { return kMember; }
};
#define WARDEN_EXPOSE(Tag, Type, member) \
  struct Tag {                           \
    friend Type MemberOf(Tag);           \
  };                                     \
  template struct ExposeMember<Tag, &member>;

using TrySpeculativeFlags = bool[Reactor::max_ops];
WARDEN_EXPOSE(TrySpeculative, TrySpeculativeFlags DescriptorState::*,
              DescriptorState::try_speculative_)
WARDEN_EXPOSE(DescriptorMutex, Mutex DescriptorState::*, DescriptorState::mutex_)
WARDEN_EXPOSE(RegisteredEvents, uint32_t DescriptorState::*, DescriptorState::registered_events_)
WARDEN_EXPOSE(OwningReactor, Reactor* DescriptorState::*, DescriptorState::reactor_)
WARDEN_EXPOSE(Descriptor, int DescriptorState::*, DescriptorState::descriptor_)
WARDEN_EXPOSE(EpollFd, int Reactor::*, Reactor::epoll_fd_)
// The events epoll last reported for the descriptor (Asio keeps them until the next report).
WARDEN_EXPOSE(LastEvents, unsigned int asio::detail::scheduler_operation::*,
              asio::detail::scheduler_operation::task_result_)
#undef WARDEN_EXPOSE

// basic_socket keeps its implementation protected; a member pointer named through a derived class
// reaches it.
struct SocketImplementation : asio::ip::tcp::socket {
  static DescriptorState* StateOf(asio::ip::tcp::socket& socket) {
    return (socket.*(&SocketImplementation::impl_)).get_implementation().reactor_data_;
  }
};

// The reactor's state of `socket` when one thread alone does its I/O (the io_context's
// concurrency hint turns the reactor's locking off, as the gateway's shards do); else null. With
// several threads, another could process the socket's events between a read and its note.
DescriptorState* OneThreadsState(asio::ip::tcp::socket& socket) {
  DescriptorState* state = SocketImplementation::StateOf(socket);
  if (state == nullptr || (state->*MemberOf(DescriptorMutex{})).enabled()) return nullptr;
  return state;
}

// Reported events after which the socket may hold something no later edge announces.
constexpr unsigned int kNotEmptyEvents = EPOLLRDHUP | EPOLLHUP | EPOLLERR | EPOLLPRI;

unsigned int LastReportedEvents(DescriptorState* state) {
  // A C-style cast may convert to a private base class ([expr.cast]/4).
  const auto* operation = (const asio::detail::scheduler_operation*)state;
  return operation->*MemberOf(LastEvents{});
}

// Asks epoll to report a peer's close (EPOLLRDHUP) along with readability, which Asio does not.
bool ReportPeersClose(DescriptorState* state) {
  uint32_t& registered = state->*MemberOf(RegisteredEvents{});
  if (registered & EPOLLRDHUP) return true;
  epoll_event event{};
  event.events = registered | EPOLLRDHUP;
  event.data.ptr = state;
  const int epoll_fd = (state->*MemberOf(OwningReactor{}))->*MemberOf(EpollFd{});
  if (::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, state->*MemberOf(Descriptor{}), &event) != 0)
    return false;
  registered = event.events;
  return false;  // events reported before this did not say whether the peer had closed
}

}  // namespace

void NoteReceiveQueueEmpty(asio::ip::tcp::socket& socket) {
  DescriptorState* state = OneThreadsState(socket);
  if (state == nullptr || !ReportPeersClose(state)) return;
  // A peer's close raises one edge: if epoll has reported it, the read must still look for the
  // end of stream, which no later edge will announce. Urgent data (EPOLLPRI) stops a read short
  // of the bytes behind it.
  if (LastReportedEvents(state) & kNotEmptyEvents) return;
  (state->*MemberOf(TrySpeculative{}))[Reactor::read_op] = false;
}

bool ReceiveQueueStillEmpty(asio::ip::tcp::socket& socket) {
  DescriptorState* state = OneThreadsState(socket);
  if (state == nullptr) return false;
  // Only a note clears the flag, and epoll's reports of bytes or a close set it again once they
  // are processed; a close reported and not processed yet is in the last events already.
  return !(state->*MemberOf(TrySpeculative{}))[Reactor::read_op] &&
         !(LastReportedEvents(state) & kNotEmptyEvents);
}

bool ReceiveQueueNotesTakeEffect() {
  return true;
}

#else

void NoteReceiveQueueEmpty(asio::ip::tcp::socket&) {}
bool ReceiveQueueStillEmpty(asio::ip::tcp::socket&) {
  return false;
}
bool ReceiveQueueNotesTakeEffect() {
  return false;
}

#endif

}  // namespace warden
