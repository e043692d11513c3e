#pragma once
// fleetps-ctl: operate running pservers over their admin RPCs (schemas/ps.fbs: TableStats,
// Save, Load, Shrink, Stop), as the trainers' PsClient does.
//
//   fleetps-ctl --servers 10.0.0.1:8500,10.0.0.2:8500 status [--interval 1]
//   fleetps-ctl --servers ... save DIR [checkpoint|delta|base|batch|0-3] [--table ID]
//   fleetps-ctl --servers ... load DIR
//   fleetps-ctl --servers ... shrink [--table ID]
//   fleetps-ctl --servers ... stop [--reason TEXT]
//
// --servers defaults to PADDLE_PSERVERS_IP_PORT_LIST; the list must name every pserver
// in the cluster's order. FLEETPS_AUTH_SECRET_FILE (the cluster secret) authenticates the
// admin commands. Checkpoint inspection without servers stays in pserver_tool.
// Exit codes: 0 done, 1 the command failed on a server, 2 usage errors or unreachable servers.

#include <iosfwd>

namespace fleetps::ctl {

// Runs one command line; human output to `out`, diagnostics to `err`. Returns the exit code.
int RunCtl(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace fleetps::ctl
