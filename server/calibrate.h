#pragma once
// `sluice serve --calibrate`: measures what the plan needs on this machine with this model — host
// memory read bandwidth, the backend's effective weight read rate, the disk's read ceiling for
// expert streaming, prefill rates at a few chunk sizes and decode rates at a few batch sizes — and
// makes the choices a later start takes (server/calibrated_plan.h).
#include <functional>
#include <string>

#include "server/calibrated_plan.h"
#include "util/result.h"

namespace sluice::server {

struct ServerOptions;

// Loads the model (several times: once per prefill chunk measured, once for the batches) with
// `options` otherwise as given. `progress` gets a line per measurement.
Result<CalibratedPlan> calibrate(const ServerOptions& options, const std::function<void(const std::string&)>& progress);

// The machine's parts, separately (bench and tests); the disk's: server/disk_read.h.
double measure_host_read_gbps(std::size_t buffer_bytes, int passes);

}  // namespace sluice::server
