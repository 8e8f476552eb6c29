// The shared config-file reader (see config_file.h).
#include "mvibr/core/config_file.h"

#include <fstream>

#include "mvibr/core/error.h"

namespace mvibr {

void store_config_file(const std::string& path,
                       const boost::program_options::options_description& options,
                       boost::program_options::variables_map* values) {
  std::ifstream file(path);
  if (!file) throw InvalidArgument(path + ": cannot open config file");
  try {
    boost::program_options::store(boost::program_options::parse_config_file(file, options),
                                  *values);
  } catch (const boost::program_options::error& e) {
    throw InvalidArgument(path + ": " + e.what());
  }
}

}  // namespace mvibr
