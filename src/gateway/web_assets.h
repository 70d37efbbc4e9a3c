// The panel's files (its page, script, style, and uPlot from npm), embedded in the binary at build
// time so the gateway serves them without network access.
#pragma once

#include <span>
#include <string_view>

namespace warden {

struct WebAsset {
  std::string_view name;  // e.g. "panel.js"
  std::string_view content;
};

std::span<const WebAsset> WebAssets();

// The asset called `name`, or nullptr.
inline const WebAsset* FindWebAsset(std::string_view name) {
  for (const WebAsset& a : WebAssets()) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

}  // namespace warden
