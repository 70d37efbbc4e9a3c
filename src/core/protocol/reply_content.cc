#include "core/protocol/reply_content.h"

#include <algorithm>

namespace warden {

using simdjson::SUCCESS;
namespace od = simdjson::ondemand;

void AddToolCallId(std::string_view id, std::vector<std::string>* ids) {
  if (!id.empty() && std::find(ids->begin(), ids->end(), id) == ids->end()) ids->emplace_back(id);
}

bool ReadContentBlocks(od::array blocks, std::string* text, std::vector<std::string>* ids) {
  for (auto element : blocks) {
    od::object block;
    if (element.get_object().get(block) != SUCCESS) continue;
    std::string_view type, block_text, id;
    for (auto field : block) {
      std::string_view key;
      if (field.unescaped_key().get(key) != SUCCESS) return false;
      std::string_view* wanted = key == "type"   ? &type
                                 : key == "text" ? &block_text
                                 : key == "id"   ? &id
                                                 : nullptr;
      if (wanted && field.value().get_string().get(*wanted) != SUCCESS) *wanted = {};
    }
    if (type == "text" || type == "output_text") text->append(block_text);
    if (type == "tool_use" && ids) AddToolCallId(id, ids);
  }
  return true;
}

void ReadToolCallIds(od::array calls, std::vector<std::string>* ids) {
  for (auto element : calls) {
    od::object call;
    std::string_view id;
    if (element.get_object().get(call) == SUCCESS &&
        call.find_field_unordered("id").get_string().get(id) == SUCCESS)
      AddToolCallId(id, ids);
  }
}

}  // namespace warden
