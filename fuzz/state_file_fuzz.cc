// libFuzzer target: a state file (a hand-edited or damaged one, say). It must be read or refused
// with a reason; what is read must save and read back to the same models and conversations, and
// map onto any list of replicas.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/state_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  constexpr double kNow = 1.8e9;
  std::vector<warden::ModelSnapshot> models;
  std::string error;
  warden::StateDamage damage;
  if (!warden::ParseState(text, kNow, &models, &error, &damage)) {
    if (error.empty()) __builtin_trap();
    return 0;
  }
  const std::string saved = warden::StateToJson(models, kNow);
  std::vector<warden::ModelSnapshot> again;
  warden::StateDamage damage_again;
  if (!warden::ParseState(saved, kNow, &again, &error, &damage_again)) __builtin_trap();
  if (again.size() != models.size() || damage_again.any()) __builtin_trap();
  for (size_t m = 0; m < models.size(); ++m)
    if (again[m].conversations.size() != models[m].conversations.size()) __builtin_trap();

  const std::vector<std::string> replicas = {"http://a:8000", "http://b:8000#rank=1"};
  for (const warden::ModelSnapshot& model : models) {
    size_t dropped = 0;
    const auto mapped = warden::MapToReplicas(model, replicas, &dropped);
    if (mapped.size() + dropped != model.conversations.size()) __builtin_trap();
  }
  return 0;
}
