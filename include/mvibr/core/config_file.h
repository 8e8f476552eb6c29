// `key = value` config files (IBRNet's format) for every subcommand: one reader, so that every
// command reports a missing file, an unknown key or a bad value the same way, naming the file.
#pragma once

#include <boost/program_options.hpp>
#include <string>

namespace mvibr {

// Stores the options of `path` into `values` (values already there, e.g. from the command line,
// win). Throws InvalidArgument "<path>: <what>" when the file cannot be read or parsed.
void store_config_file(const std::string& path,
                       const boost::program_options::options_description& options,
                       boost::program_options::variables_map* values);

}  // namespace mvibr
