// The subcommands of `mvibr`. Each takes the arguments after its name and returns the exit code.
#pragma once

#include <string>
#include <vector>

namespace mvibr::cli {

int run_selfcheck(const std::vector<std::string>& args);
// `command_line` is the whole invocation, stored in the files prep writes.
int run_prep(const std::vector<std::string>& args, const std::string& command_line);
int run_inspect(const std::vector<std::string>& args);
int run_train(const std::vector<std::string>& args);

// One line per component: mvibr itself, the backends, and the libraries it was built with.
std::string version_report();

}  // namespace mvibr::cli
