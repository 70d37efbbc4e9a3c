// What a reply is known by, read from either side of the exchange: the text of its content blocks
// and the ids of the tool calls it made. The gateway reads them from a response as it passes and,
// later, from the request that sends that reply back, and the two must agree.
// Pure: no I/O.
#pragma once

#include <simdjson.h>

#include <string>
#include <string_view>
#include <vector>

namespace warden {

// Adds a tool call's id to `ids`, once (some engines repeat it in every piece of a streamed call).
void AddToolCallId(std::string_view id, std::vector<std::string>* ids);

// Appends the text of a content array's text blocks ({"type":"text"}, the Responses API's
// "output_text") to `text`, and the ids of its tool-use blocks to `ids` (if not null); other
// blocks (thinking, images, tool results) are left out. Returns false on a malformed block.
bool ReadContentBlocks(simdjson::ondemand::array blocks, std::string* text,
                       std::vector<std::string>* ids);

// The ids of OpenAI "tool_calls" into `ids`.
void ReadToolCallIds(simdjson::ondemand::array calls, std::vector<std::string>* ids);

}  // namespace warden
