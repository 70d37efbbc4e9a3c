/* Counts a process's socket reads and writes, for bench/proxy_syscalls.sh (LD_PRELOAD).
 *
 * Wraps recv, recvfrom, recvmsg, read and readv (on sockets); send, sendto, sendmsg, write and
 * writev (on sockets); and every second
 * rewrites $SYSCALL_COUNT_DIR/<pid> with four totals: reads, reads that failed with EAGAIN,
 * reads with MSG_PEEK, writes. Children forked after start (nginx's workers) count apart. The
 * file is opened before the process (or a forked worker) can drop its privileges. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

static long reads, failed_reads, peeks, writes;

static int is_socket(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

static void count_read(ssize_t result, int flags) {
  __atomic_add_fetch(&reads, 1, __ATOMIC_RELAXED);
  if (flags & MSG_PEEK) __atomic_add_fetch(&peeks, 1, __ATOMIC_RELAXED);
  if (result < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
    __atomic_add_fetch(&failed_reads, 1, __ATOMIC_RELAXED);
}

#define REAL(name) static __typeof__(name)* real_##name; if (!real_##name) real_##name = dlsym(RTLD_NEXT, #name)

ssize_t recv(int fd, void* buf, size_t len, int flags) {
  REAL(recv);
  ssize_t r = real_recv(fd, buf, len, flags);
  count_read(r, flags);
  return r;
}
ssize_t recvfrom(int fd, void* buf, size_t len, int flags, struct sockaddr* a, socklen_t* l) {
  REAL(recvfrom);
  ssize_t r = real_recvfrom(fd, buf, len, flags, a, l);
  count_read(r, flags);
  return r;
}
ssize_t recvmsg(int fd, struct msghdr* m, int flags) {
  REAL(recvmsg);
  ssize_t r = real_recvmsg(fd, m, flags);
  count_read(r, flags);
  return r;
}
ssize_t read(int fd, void* buf, size_t len) {
  REAL(read);
  ssize_t r = real_read(fd, buf, len);
  int e = errno;
  if (is_socket(fd)) {
    errno = e;
    count_read(r, 0);
  }
  errno = e;
  return r;
}
ssize_t readv(int fd, const struct iovec* v, int n) {
  REAL(readv);
  ssize_t r = real_readv(fd, v, n);
  int e = errno;
  if (is_socket(fd)) {
    errno = e;
    count_read(r, 0);
  }
  errno = e;
  return r;
}
ssize_t send(int fd, const void* buf, size_t len, int flags) {
  REAL(send);
  __atomic_add_fetch(&writes, 1, __ATOMIC_RELAXED);
  return real_send(fd, buf, len, flags);
}
ssize_t sendto(int fd, const void* buf, size_t len, int flags, const struct sockaddr* a,
               socklen_t l) {
  REAL(sendto);
  __atomic_add_fetch(&writes, 1, __ATOMIC_RELAXED);
  return real_sendto(fd, buf, len, flags, a, l);
}
ssize_t write(int fd, const void* buf, size_t len) {
  REAL(write);
  ssize_t r = real_write(fd, buf, len);
  int e = errno;
  if (is_socket(fd)) __atomic_add_fetch(&writes, 1, __ATOMIC_RELAXED);
  errno = e;
  return r;
}
ssize_t sendmsg(int fd, const struct msghdr* m, int flags) {
  REAL(sendmsg);
  __atomic_add_fetch(&writes, 1, __ATOMIC_RELAXED);
  return real_sendmsg(fd, m, flags);
}
ssize_t writev(int fd, const struct iovec* v, int n) {
  REAL(writev);
  ssize_t r = real_writev(fd, v, n);
  int e = errno;
  if (is_socket(fd)) __atomic_add_fetch(&writes, 1, __ATOMIC_RELAXED);
  errno = e;
  return r;
}

static char dir[4096] = "/tmp";  /* read at start: nginx clears its workers' environment */

static void* report(void* file) {
  FILE* out = file;
  for (;;) {
    sleep(1);
    rewind(out);
    fprintf(out, "%ld %ld %ld %ld          \n", __atomic_load_n(&reads, __ATOMIC_RELAXED),
            __atomic_load_n(&failed_reads, __ATOMIC_RELAXED),
            __atomic_load_n(&peeks, __ATOMIC_RELAXED), __atomic_load_n(&writes, __ATOMIC_RELAXED));
    fflush(out);
  }
  return NULL;
}

/* In the process (or the forked child) itself, before it can drop its privileges. */
static void start_reporter(void) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%d", dir, getpid());
  FILE* out = fopen(path, "w");
  if (!out) return;
  pthread_t thread;
  pthread_create(&thread, NULL, report, out);
  pthread_detach(thread);
}

__attribute__((constructor)) static void init(void) {
  const char* from_env = getenv("SYSCALL_COUNT_DIR");
  if (from_env) snprintf(dir, sizeof dir, "%s", from_env);
  start_reporter();
  pthread_atfork(NULL, NULL, start_reporter);
}
