// The body of vLLM's runtime LoRA updates (POST /v1/load_lora_adapter, /v1/unload_lora_adapter):
// read by the gateway to pass an update to every server, and by the simulator to apply it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace warden {

// What a load or unload request asks (vLLM's LoadLoRAAdapterRequest, UnloadLoRAAdapterRequest).
struct AdapterRequest {
  std::string name = {};  // "lora_name"; empty when absent (vLLM then refuses the request)
  std::string path = {};  // "lora_path"
  bool inplace = false;   // "load_inplace": replace an adapter loaded already
};

// The request `body` makes; a field of the wrong type is read as absent. Nothing when the body is
// no JSON object.
std::optional<AdapterRequest> ParseAdapterRequest(std::string_view body);

}  // namespace warden
