// Progress of `mvibr eval` and `mvibr render` (see commands.h): a render of a large view takes
// minutes on a CPU, and a command that prints nothing that long looks hung.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "commands.h"
#include "mvibr/train/monitor.h"

namespace mvibr::cli {

RenderProgressLine::RenderProgressLine(std::string what, int rank, int ranks)
    : what_(std::move(what)),
      rank_(rank),
      ranks_(ranks),
      in_place_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      drawn_at_(start_) {}

RenderProgressLine::~RenderProgressLine() {
  if (drawn_ && in_place_) std::fprintf(stderr, "\n");
}

void RenderProgressLine::update(size_t done, size_t items, int rays_done, int rays) {
  if (rank_ != 0 || items == 0 || rays <= 0) return;
  const double fraction = (double(done) + double(rays_done) / rays) / double(items);
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const int tenth = int(fraction * 10);
  if (in_place_) {
    if (drawn_ && fraction < 1 && std::chrono::duration<double>(now - drawn_at_).count() < 0.2) {
      return;
    }
  } else if (tenth <= printed_tenth_) {
    return;
  }
  printed_tenth_ = tenth;
  drawn_at_ = now;
  drawn_ = true;
  const std::string share =
      ranks_ > 1 ? " of rank 0's " + std::to_string(items) : " of " + std::to_string(items);
  const std::string eta =
      fraction > 0 ? train::format_duration(elapsed * (1 - fraction) / fraction) : "?";
  std::fprintf(stderr, "%s%s %zu%s: %d of %d rays; %.0f%% done, eta %s%s", in_place_ ? "\r" : "",
               what_.c_str(), std::min(done + 1, items), share.c_str(), rays_done, rays,
               100 * fraction, eta.c_str(), in_place_ ? "\033[K" : "\n");
  std::fflush(stderr);
}

train::RenderProgress RenderProgressLine::callback() {
  return [this](size_t done, size_t items, int rays_done, int rays) {
    update(done, items, rays_done, rays);
  };
}

}  // namespace mvibr::cli
