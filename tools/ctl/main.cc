// fleetps-ctl: status and admin commands for running pservers (tools/ctl/ctl.h).
#include <iostream>

#include "tools/ctl/ctl.h"

int main(int argc, char** argv) { return fleetps::ctl::RunCtl(argc, argv, std::cout, std::cerr); }
