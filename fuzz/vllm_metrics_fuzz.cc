// libFuzzer target: a replica's /metrics text, read as the gateway's scrape reads it. Byte 0 picks
// the replicas behind the URL (1 to 8) and whether they are a data-parallel server's engines.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/protocol/vllm_metrics_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int replicas = (data[0] & 7) + 1;
  const bool data_parallel = (data[0] & 8) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  std::vector<warden::ScrapedMetrics> scraped;
  std::string error;
  int engines = 0;
  warden::ReadVllmMetrics(text, replicas, data_parallel, &scraped, &error, &engines);
  return 0;
}
