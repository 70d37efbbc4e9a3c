#include "core/protocol/reply_content.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <string>
#include <vector>

#include "core/routing/session_key.h"

namespace warden {
namespace {

// What a reply's hash is, from its definition: the trimmed text hashed with the seed "Reply" + 1,
// then each tool call's id with the hash so far + 1 (peers and state files of other versions
// hold keys made so).
uint64_t Defined(std::string_view trimmed, const std::vector<std::string>& ids) {
  uint64_t value = XXH3_64bits_withSeed(trimmed.data(), trimmed.size(), 0x5265706c79 + 1);
  for (const std::string& id : ids) value = XXH3_64bits_withSeed(id.data(), id.size(), value + 1);
  return value;
}

uint64_t InPieces(std::string_view text, size_t piece, const std::vector<std::string>& ids = {}) {
  std::string kept;
  ReplyText reply(&kept);
  for (size_t at = 0; at < text.size(); at += piece) reply.append(text.substr(at, piece));
  EXPECT_EQ(kept, text);
  return reply.Hash(ids);
}

// A streamed reply hashed as its pieces come has the hash of the whole, trimmed, whatever the
// pieces: white space at both ends (even in pieces of its own) is left out, inside it is kept.
TEST(ReplyText, HashesPiecesAsTheWholeTrimmed) {
  const std::string text = " \n Hello,  world!\n\nHow can I help?\t \r\n ";
  const std::vector<std::string> ids = {"toolu_1", "toolu_2"};
  for (size_t piece = 1; piece <= text.size(); ++piece) {
    EXPECT_EQ(InPieces(text, piece), Defined("Hello,  world!\n\nHow can I help?", {})) << piece;
    EXPECT_EQ(InPieces(text, piece, ids), Defined("Hello,  world!\n\nHow can I help?", ids));
    EXPECT_EQ(InPieces(text, piece), ReplyHash(text));
  }
  EXPECT_EQ(InPieces(" \t\n", 1), 0u);  // neither text nor tool calls
  EXPECT_EQ(InPieces("", 1), 0u);
  EXPECT_EQ(InPieces(" ", 1, ids), Defined("", ids));  // tool calls only
  EXPECT_NE(InPieces("a b", 1), InPieces("ab", 1));
}

// A long reply costs the hash's state, not its length: white space at its end is held as runs.
TEST(ReplyText, ALongReplyIsNotHeld) {
  const std::string text = std::string(4 << 20, 'x') + std::string(3 << 20, ' ') + "\n\n";
  ReplyText reply;
  for (size_t at = 0; at < text.size(); at += 4096) reply.append(text.substr(at, 4096));
  EXPECT_EQ(reply.Hash({}), Defined(std::string(4 << 20, 'x'), {}));
  EXPECT_EQ(reply.Hash({}), ReplyHash(text));
  reply.append(std::string(5000, '\t') + "y");  // more text: the white space was part of it
  EXPECT_EQ(reply.Hash({}), ReplyHash(text + std::string(5000, '\t') + "y"));
}

TEST(ReplyText, KeepsTheFirstToolCallIdsOnly) {
  std::vector<std::string> ids;
  for (size_t i = 0; i < kMaxKeyedToolCalls + 10; ++i)
    AddToolCallId("id" + std::to_string(i), &ids);
  AddToolCallId("id0", &ids);
  EXPECT_EQ(ids.size(), kMaxKeyedToolCalls);
  std::vector<std::string> more = ids;
  more.push_back("another");
  EXPECT_EQ(ReplyHash("x", more), ReplyHash("x", ids));  // a request may hold them all
}

}  // namespace
}  // namespace warden
