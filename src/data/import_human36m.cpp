// Human3.6M as a pose data set (human36m.h). The layout is h36m-fetch's (process_all.py: annot.h5
// and imageSequence/ per action) and the cameras una-dinosauria's (3d-pose-baseline's
// cameras.py), as learnable triangulation's preprocessing reads them. Every file is checked
// before anything is taken from it; a calibration is checked against the poses it must explain.
#include "mvibr/data/human36m.h"

#include <algorithm>
#include <boost/property_tree/ptree.hpp>
#include <boost/property_tree/xml_parser.hpp>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "import_common.h"
#include "mvibr/core/error.h"
#include "mvibr/data/downscale.h"
#include "mvibr/data/undistort.h"
#include "mvibr/hdf5/hdf5_file.h"

namespace mvibr::data {

// Pelvis (Hip), RHip, RKnee, RFoot, LHip, LKnee, LFoot, Spine, Thorax, Neck/Nose, Head,
// LShoulder, LElbow, LWrist, RShoulder, RElbow, RWrist: 3d-pose-baseline's H36M_NAMES indices.
const int kHuman36mJointIndex[kPoseJoints] = {0,  1,  2,  3,  6,  7,  8,  12, 13,
                                              14, 15, 17, 18, 19, 25, 26, 27};

const std::vector<std::string> kProtocolTestSubjects = {"S9", "S11"};
const std::vector<std::string> kDamagedActions = {"S9/Greeting-2", "S9/SittingDown-2",
                                                  "S9/Waiting-1"};

namespace {

namespace fs = std::filesystem;

constexpr double kMetresPerMillimetre = 1e-3;
constexpr double kMaxCoordinateMm = 1e6;  // a kilometre from the origin
constexpr double kLabelNoticePixels = 2;  // pose/2d farther than this from ours is reported

struct Calibrated {
  std::string name;
  double rotation[9];  // R, row-major: x_world = R x_camera + T
  double centre[3];    // T, millimetres
  double fx, fy, cx, cy;
  Distortion distortion;
  int width = 0, height = 0;  // its images', from the first one read
};

struct Action {
  fs::path folder;
  std::string subject, name;
};

// One action's rows of one camera: frame number -> pose/3d (32 x 3, millimetres, camera frame)
// and, where annot.h5 has it, pose/2d (32 x 2, pixels).
struct CameraRows {
  std::map<long, std::vector<double>> pose_3d, pose_2d;
};

bool is_subject_name(const std::string& name) {
  return name.size() >= 2 && name.size() <= 4 && name[0] == 'S' &&
         name.find_first_not_of("0123456789", 1) == std::string::npos;
}

// A dataset of `count` numbers of any shape, as doubles; every one finite.
std::vector<double> read_values(const h5::File& file, const std::string& name, size_t count) {
  if (!file.has(name)) file.fail("no dataset '" + name + "'");
  const std::vector<long long> any(size_t(file.rank(name)), -1);
  const std::vector<hsize_t> shape = file.shape(name, any);
  std::vector<long long> expected;
  size_t total = 1;
  for (const hsize_t extent : shape) total *= size_t(extent), expected.push_back((long long)extent);
  if (total != count) {
    file.fail("'" + name + "' has " + std::to_string(total) + " values, not " +
              std::to_string(count));
  }
  std::vector<double> values = file.read_numbers_as_doubles(name, expected);
  for (const double v : values) {
    if (!std::isfinite(v)) file.fail("'" + name + "' is not finite");
  }
  return values;
}

// A camera's intrinsics and distortion from f, c, k = [k1 k2 k3], p = [p1 p2]; false when a focal
// length is not positive.
bool set_intrinsics(Calibrated* c, const double* f, const double* cc, const double* k,
                    const double* p) {
  c->fx = f[0], c->fy = f[1], c->cx = cc[0], c->cy = cc[1];
  c->distortion = {k[0], k[1], k[2], p[0], p[1]};
  return f[0] > 0 && f[1] > 0;
}

// Subject S<n>'s cameras in una-dinosauria's cameras.h5: subject<n>/camera1.. in name order.
std::vector<Calibrated> read_cameras_h5(const std::string& path, const std::string& subject) {
  h5::LibraryGuard lock(h5::library_lock());
  const h5::File file = h5::File::open_read_only(path);
  const std::string group = "subject" + subject.substr(1);
  if (!file.has(group)) file.fail("no group '" + group + "' (the cameras of " + subject + ")");
  std::vector<Calibrated> all;
  for (const std::string& member : file.members(group)) {
    if (member.rfind("camera", 0) != 0) continue;
    const std::string at = group + "/" + member + "/";
    Calibrated c;
    for (const double code : read_values(file, at + "Name", 8)) {
      if (code < '0' || code > 'z' || code != std::floor(code)) {
        file.fail("'" + at + "Name' is not a camera id (8 character codes)");
      }
      c.name += char(code);
    }
    const std::vector<double> r = read_values(file, at + "R", 9),
                              t = read_values(file, at + "T", 3),
                              f = read_values(file, at + "f", 2),
                              cc = read_values(file, at + "c", 2),
                              k = read_values(file, at + "k", 3),
                              p = read_values(file, at + "p", 2);
    std::copy(r.begin(), r.end(), c.rotation);
    std::copy(t.begin(), t.end(), c.centre);
    if (!set_intrinsics(&c, f.data(), cc.data(), k.data(), p.data())) {
      file.fail("'" + at + "f' must be positive");
    }
    all.push_back(c);
  }
  return all;
}

// Subject S<n>'s cameras in H36M's metadata.xml (h36m-fetch ships it): <w0> holds 300 numbers,
// camera k's (from 1) of subject n at 6 (11 (k - 1) + n - 1): three angles a, b, c with
// world-to-camera rotation Rx(a) Ry(b) Rz(c), then T; its f, c, k, p at 264 + 9 (k - 1). The ids
// are <dbcameras><index2id>'s items (3d-pose-baseline's cameras.py decodes it the same way).
std::vector<Calibrated> read_metadata_xml(const std::string& path, const std::string& subject) {
  constexpr int kSubjects = 11, kCameras = 4, kValues = 300, kIntrinsicsAt = 264;
  namespace pt = boost::property_tree;
  pt::ptree root;
  std::istringstream text(read_text_file(path));
  std::vector<std::string> ids;
  std::vector<double> w0;
  try {
    pt::read_xml(text, root);
    const pt::ptree& top = root.begin()->second;
    for (const auto& item : top.get_child("dbcameras.index2id")) {
      ids.push_back(item.second.get_value<std::string>());
    }
    std::istringstream numbers(top.get<std::string>("w0"));
    char bracket = 0;
    numbers >> bracket;
    for (double v; numbers >> v;) w0.push_back(v);
  } catch (const pt::ptree_error& e) {
    throw InvalidArgument(path + ": not H36M's metadata.xml (" + e.what() + ")");
  }
  if (w0.size() != kValues || ids.size() != kCameras) {
    throw InvalidArgument(path + ": <w0> must hold " + std::to_string(kValues) + " numbers and " +
                          "<dbcameras><index2id> 4 ids; they hold " + std::to_string(w0.size()) +
                          " and " + std::to_string(ids.size()));
  }
  const int number = std::stoi(subject.substr(1));
  if (number > kSubjects) {
    throw InvalidArgument(path + ": no cameras of " + subject + " (subjects S1 to S11)");
  }
  std::vector<Calibrated> all;
  for (int k = 0; k < kCameras; ++k) {
    const double* e = &w0[size_t(6 * (kSubjects * k + number - 1))];
    const double* in = &w0[size_t(kIntrinsicsAt + 9 * k)];
    for (int i = 0; i < 6; ++i) {
      if (!std::isfinite(e[i]) || !std::isfinite(in[i]) || !std::isfinite(in[i + 3])) {
        throw InvalidArgument(path + ": <w0> is not finite");
      }
    }
    Calibrated c;
    c.name = ids[size_t(k)];
    const double sa = std::sin(e[0]), ca = std::cos(e[0]), sb = std::sin(e[1]), cb = std::cos(e[1]),
                 sc = std::sin(e[2]), cc = std::cos(e[2]);
    const double w2c[9] = {cb * cc,
                           -cb * sc,
                           sb,
                           ca * sc + sa * sb * cc,
                           ca * cc - sa * sb * sc,
                           -sa * cb,
                           sa * sc - ca * sb * cc,
                           sa * cc + ca * sb * sc,
                           ca * cb};
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) c.rotation[3 * i + j] = w2c[3 * j + i];
    }
    std::copy(e + 3, e + 6, c.centre);
    if (!set_intrinsics(&c, in, in + 2, in + 4, in + 7)) {
      throw InvalidArgument(path + ": camera " + c.name + "'s focal length must be positive");
    }
    all.push_back(c);
  }
  return all;
}

// The cameras of subject S<n> in the calibration, metadata.xml or cameras.h5 (told by its first
// byte): --cameras' by name, else all.
std::vector<Calibrated> read_calibration(const std::string& path, const std::string& subject,
                                         const std::vector<std::string>& wanted) {
  std::ifstream file(path, std::ios::binary);
  char first = 0;
  if (!file.get(first)) throw InvalidArgument(path + ": cannot read the file (--calibration)");
  const bool xml = first == '<' || first == '\xef';  // '<', or UTF-8's byte order mark
  const std::vector<Calibrated> all =
      xml ? read_metadata_xml(path, subject) : read_cameras_h5(path, subject);
  if (wanted.empty()) {
    if (all.size() < 2) {
      throw InvalidArgument(path + ": " + subject + " has " + std::to_string(all.size()) +
                            " camera(s); a pose sample needs 2");
    }
    return all;
  }
  if (wanted.size() < 2) {
    throw InvalidArgument("--cameras names " + std::to_string(wanted.size()) +
                          " camera; a pose sample needs 2");
  }
  std::vector<Calibrated> chosen;
  for (const std::string& name : wanted) {
    if (std::count(wanted.begin(), wanted.end(), name) > 1) {
      throw InvalidArgument("--cameras names " + name + " twice");
    }
    const auto found =
        std::find_if(all.begin(), all.end(), [&](const Calibrated& c) { return c.name == name; });
    if (found == all.end()) {
      throw InvalidArgument(path + ": " + subject + " has no camera " + name + " (--cameras)");
    }
    chosen.push_back(*found);
  }
  return chosen;
}

// The subject folders of the source (itself, when it is one), by name, with their actions.
std::vector<Action> find_actions(const std::string& source) {
  const fs::path root = fs::path(source).lexically_normal();
  if (!fs::is_directory(root)) throw InvalidArgument(source + ": no such folder (--source)");
  std::vector<fs::path> subjects;
  if (is_subject_name(directory_name(root.string()))) {
    subjects.push_back(root);
  } else {
    for (const fs::directory_entry& entry : fs::directory_iterator(root)) {
      if (entry.is_directory() && is_subject_name(entry.path().filename().string())) {
        subjects.push_back(entry.path());
      }
    }
  }
  // S1, S5, ..., S11: by number.
  std::sort(subjects.begin(), subjects.end(), [](const fs::path& a, const fs::path& b) {
    return std::stoi(a.filename().string().substr(1)) < std::stoi(b.filename().string().substr(1));
  });
  if (subjects.empty()) {
    throw InvalidArgument(source +
                          ": not a Human3.6M processed folder (no subject folders S1, S5, ...)");
  }
  std::vector<Action> actions;
  for (const fs::path& subject : subjects) {
    std::vector<fs::path> folders;
    for (const fs::directory_entry& entry : fs::directory_iterator(subject)) {
      if (entry.is_directory() && fs::is_regular_file(entry.path() / "annot.h5")) {
        folders.push_back(entry.path());
      }
    }
    if (folders.empty()) {
      throw InvalidArgument(subject.string() + ": no action folder with an annot.h5");
    }
    std::sort(folders.begin(), folders.end());
    for (const fs::path& folder : folders) {
      actions.push_back({folder, subject.filename().string(), folder.filename().string()});
    }
  }
  return actions;
}

// annot.h5's rows by camera id.
std::map<std::string, CameraRows> read_annotations(const fs::path& path) {
  h5::LibraryGuard lock(h5::library_lock());
  const h5::File file = h5::File::open_read_only(path.string());
  for (const char* name : {"camera", "frame", "pose/3d"}) {
    if (!file.has(name)) file.fail(std::string("no dataset '") + name + "'");
  }
  const long long rows = (long long)file.shape("camera", {-1})[0];
  file.shape("frame", {rows});
  const int joints = file.rank("pose/3d") == 3 ? int(file.shape("pose/3d", {-1, -1, -1})[1]) : 0;
  if (joints != kHuman36mSourceJoints || file.shape("pose/3d", {-1, -1, -1})[2] != 3) {
    file.fail("'pose/3d' must be " + std::to_string(rows) + " x 32 x 3 (H36M's 32 joints)" +
              (joints > 0 ? ", it has " + std::to_string(joints) + " joints" : ""));
  }
  const std::vector<double> cameras = file.read_numbers_as_doubles("camera", {rows});
  const std::vector<double> frames = file.read_numbers_as_doubles("frame", {rows});
  const std::vector<double> pose_3d = file.read_doubles("pose/3d", {rows, 32, 3});
  std::vector<double> pose_2d;
  if (file.has("pose/2d")) pose_2d = file.read_numbers_as_doubles("pose/2d", {rows, 32, 2});
  std::map<std::string, CameraRows> by_camera;
  for (long long i = 0; i < rows; ++i) {
    const std::string row = "row " + std::to_string(i);
    if (!(cameras[size_t(i)] >= 0 && cameras[size_t(i)] < 1e9) ||
        cameras[size_t(i)] != std::floor(cameras[size_t(i)])) {
      file.fail(row + ": 'camera' is not a camera id");
    }
    if (!(frames[size_t(i)] >= 1 && frames[size_t(i)] < 1e7) ||
        frames[size_t(i)] != std::floor(frames[size_t(i)])) {
      file.fail(row + ": 'frame' must be a whole number from 1");
    }
    char id[16];
    std::snprintf(id, sizeof id, "%08ld", long(cameras[size_t(i)]));
    CameraRows& camera = by_camera[id];
    const long frame = long(frames[size_t(i)]);
    const double* x = &pose_3d[size_t(i) * 96];
    for (int k = 0; k < 96; ++k) {
      if (!(std::abs(x[k]) < kMaxCoordinateMm)) {
        file.fail(row + ": pose/3d joint " + std::to_string(k / 3) +
                  " is not finite or over a kilometre away");
      }
    }
    if (!camera.pose_3d.emplace(frame, std::vector<double>(x, x + 96)).second) {
      file.fail(row + ": camera " + id + " has frame " + std::to_string(frame) + " twice");
    }
    if (!pose_2d.empty()) {
      camera.pose_2d[frame].assign(&pose_2d[size_t(i) * 64], &pose_2d[size_t(i) * 64 + 64]);
    }
  }
  return by_camera;
}

fs::path image_path(const Action& action, const std::string& camera, long frame) {
  char name[32];
  std::snprintf(name, sizeof name, "img_%06ld.jpg", frame);
  return action.folder / "imageSequence" / camera / name;
}

// x_world = R x_camera + T, millimetres.
Vec3<double> to_world(const Calibrated& c, const double* x) {
  const double* r = c.rotation;
  return {r[0] * x[0] + r[1] * x[1] + r[2] * x[2] + c.centre[0],
          r[3] * x[0] + r[4] * x[1] + r[5] * x[2] + c.centre[1],
          r[6] * x[0] + r[7] * x[1] + r[8] * x[2] + c.centre[2]};
}

// The camera as mvibr's, in metres, at its full image size.
PinholeCamera<double> pinhole(const Calibrated& c, const std::string& where) {
  PinholeCamera<double> camera{};
  camera.width = c.width, camera.height = c.height;
  camera.fx = c.fx, camera.fy = c.fy, camera.cx = c.cx, camera.cy = c.cy;
  double c2w[12];
  for (int row = 0; row < 3; ++row) {
    for (int col = 0; col < 3; ++col) c2w[row * 4 + col] = c.rotation[row * 3 + col];
    c2w[row * 4 + 3] = kMetresPerMillimetre * c.centre[row];
  }
  set_pose(&camera, c2w, where + " (R)");
  return camera;
}

// The calibration's distorted projection of a world point (millimetres), in pixels.
void project_distorted(const Calibrated& c, const Vec3<double>& x, double* u, double* v) {
  const double d[3] = {x.x - c.centre[0], x.y - c.centre[1], x.z - c.centre[2]};
  const double* r = c.rotation;  // x_camera = R^T d
  const double xc = r[0] * d[0] + r[3] * d[1] + r[6] * d[2];
  const double yc = r[1] * d[0] + r[4] * d[1] + r[7] * d[2];
  const double zc = r[2] * d[0] + r[5] * d[1] + r[8] * d[2];
  double xd, yd;
  distort_normalized(c.distortion, xc / zc, yc / zc, &xd, &yd);
  *u = c.fx * xd + c.cx, *v = c.fy * yd + c.cy;
}

// One frame's world joints (millimetres, the skeleton's): every camera's pose/3d through its
// calibration, averaged. Each camera's joints must lie within kHuman36mAgreementMm of the mean
// of the others'; else InvalidArgument "<before><camera><middle><distance> from the other
// cameras' (joint <name>)<after>", naming the worst.
std::vector<Vec3<double>> world_joints(const std::vector<Calibrated>& cameras,
                                       const std::map<std::string, CameraRows>& rows, long frame,
                                       const std::string& before, const std::string& middle,
                                       const std::string& after) {
  const size_t n = cameras.size();
  std::vector<Vec3<double>> world(kPoseJoints, Vec3<double>{0, 0, 0});
  std::vector<std::vector<Vec3<double>>> seen(n);
  for (size_t c = 0; c < n; ++c) {
    const std::vector<double>& pose = rows.at(cameras[c].name).pose_3d.at(frame);
    for (int j = 0; j < kPoseJoints; ++j) {
      seen[c].push_back(to_world(cameras[c], &pose[size_t(3 * kHuman36mJointIndex[j])]));
      world[size_t(j)] = world[size_t(j)] + (1.0 / double(n)) * seen[c].back();
    }
  }
  double worst = 0;
  size_t worst_camera = 0;
  int worst_joint = 0;
  for (size_t c = 0; c < n; ++c) {
    for (int j = 0; j < kPoseJoints; ++j) {
      const Vec3<double> others =
          (1.0 / double(n - 1)) * (double(n) * world[size_t(j)] - seen[c][size_t(j)]);
      const double apart = norm(seen[c][size_t(j)] - others);
      if (apart > worst) worst = apart, worst_camera = c, worst_joint = j;
    }
  }
  if (worst > kHuman36mAgreementMm) {
    char text[64];
    std::snprintf(text, sizeof text, "%.1f mm", worst);
    throw InvalidArgument(before + cameras[worst_camera].name + middle + text +
                          " from the other cameras' (joint " + kPoseJointNames[worst_joint] + ")" +
                          after);
  }
  return world;
}

// How far annot.h5's pose/2d of a frame lies from the calibration's distorted projection of the
// world joints (millimetres), at most, in pixels; 0 where it has none.
double pose_2d_gap(const std::vector<Calibrated>& cameras,
                   const std::map<std::string, CameraRows>& rows, long frame,
                   const std::vector<Vec3<double>>& world) {
  double worst = 0;
  for (const Calibrated& c : cameras) {
    const auto given = rows.at(c.name).pose_2d.find(frame);
    if (given == rows.at(c.name).pose_2d.end()) continue;
    for (int j = 0; j < kPoseJoints; ++j) {
      double u, v;
      project_distorted(c, world[size_t(j)], &u, &v);
      const double* label = &given->second[size_t(2 * kHuman36mJointIndex[j])];
      worst = std::max(worst, std::hypot(u - label[0], v - label[1]));
    }
  }
  return worst;
}

// A view to read: its image and calibration; the native-scale camera it is resampled into (the
// crop) and the view's camera, that one scaled.
struct PlannedView {
  fs::path image;
  const Calibrated* calibration;  // kept alive by Scene::read_rgb
  PinholeCamera<double> crop, camera;
};

std::vector<uint8_t> read_view_image(const PlannedView& plan) {
  const Calibrated& c = *plan.calibration;
  const Image image = load_image(plan.image.string());
  if (image.width != c.width || image.height != c.height) {
    throw InvalidArgument(plan.image.string() + ": " + size_text(image.width, image.height) +
                          " pixels, but the first image of camera " + c.name + " is " +
                          size_text(c.width, c.height));
  }
  const std::vector<uint8_t> rgb = composite_to_rgb(image, 0);
  PinholeCamera<double> full{};
  full.width = c.width, full.height = c.height;
  full.fx = c.fx, full.fy = c.fy, full.cx = c.cx, full.cy = c.cy;
  return crop_view_rgb(rgb, full, c.distortion, plan.crop, plan.camera);
}

}  // namespace

Scene import_human36m(const std::string& source, const Human36mOptions& options) {
  if (options.frame_step < 1 || options.max_frames < 0 ||
      !(options.body_crop >= 0 && options.body_crop <= 10)) {
    throw InvalidArgument(
        "human36m: --frame_step must be at least 1, --max_frames at least 0, --body_crop in "
        "[0, 10]");
  }
  if (options.calibration.empty()) {
    throw InvalidArgument("human36m: needs --calibration (metadata.xml or cameras.h5)");
  }
  const std::vector<Action> actions = find_actions(source);
  // By subject; the views to read point into it, so Scene::read_rgb keeps it.
  const auto calibrations = std::make_shared<std::map<std::string, std::vector<Calibrated>>>();
  std::map<std::string, std::vector<Calibrated>>& cameras = *calibrations;
  for (const Action& action : actions) {
    if (cameras.count(action.subject)) continue;
    std::vector<Calibrated>& subject = cameras[action.subject] =
        read_calibration(options.calibration, action.subject, options.cameras);
    if (subject.size() != cameras.begin()->second.size()) {
      throw InvalidArgument(options.calibration + ": " + action.subject + " has " +
                            std::to_string(subject.size()) + " cameras, " + cameras.begin()->first +
                            " " + std::to_string(cameras.begin()->second.size()) +
                            "; choose the same ones with --cameras");
    }
  }
  // Every camera's image size from its first image, and the crop they share.
  int width = 0, height = 0;
  for (auto& [subject, subject_cameras] : cameras) {
    for (Calibrated& c : subject_cameras) {
      for (const Action& action : actions) {
        const fs::path folder = action.folder / "imageSequence" / c.name;
        if (action.subject != subject || !fs::is_directory(folder)) continue;
        const std::vector<std::string> files = image_files_in(folder.string());
        if (files.empty()) continue;
        const Image first = load_image(files[0]);
        c.width = first.width, c.height = first.height;
        break;
      }
      if (c.width == 0) {
        throw InvalidArgument(source + ": no images of camera " + c.name + " of " + subject +
                              " (imageSequence/" + c.name + "/ in its actions)");
      }
      width = width == 0 ? c.width : std::min(width, c.width);
      height = height == 0 ? c.height : std::min(height, c.height);
    }
  }
  const FrameSize size = options.body_crop > 0
                             ? body_crop_size("human36m", options.width, options.height)
                             : pose_output_size(width, height, options.width, options.height);
  std::vector<std::string> test_subjects;
  for (const auto& [subject, unused] : cameras) {
    const std::vector<std::string>& held_out =
        options.test_subjects.value_or(kProtocolTestSubjects);
    if (std::count(held_out.begin(), held_out.end(), subject)) test_subjects.push_back(subject);
  }
  if (test_subjects.size() == cameras.size()) {
    if (options.test_subjects) {
      throw InvalidArgument(source + ": every subject is a test subject (--test_subjects); none " +
                            "is left to train on");
    }
    test_subjects.clear();  // only protocol test subjects: nothing held out
  }

  Scene scene;
  scene.name = "human36m";
  scene.source_format = "human36m";
  scene.depth_bounds_from =
      "twice the farthest camera's distance from the origin (the pose model does not use them)";
  scene.skeleton.assign(kPoseParents, kPoseParents + kPoseJoints);
  scene.joint_names.assign(kPoseJointNames, kPoseJointNames + kPoseJoints);
  std::vector<PlannedView> plans;
  double worst_label = 0;
  for (const Action& action : actions) {
    const std::string action_name = action.subject + "/" + action.name;
    if (options.skip_damaged_actions &&
        std::count(kDamagedActions.begin(), kDamagedActions.end(), action_name)) {
      scene.warnings.push_back("human36m: " + action_name +
                               " skipped: its 3D labels are damaged (--skip_damaged_actions)");
      continue;
    }
    const fs::path annot = action.folder / "annot.h5";
    const std::map<std::string, CameraRows> rows = read_annotations(annot);
    const std::vector<Calibrated>& subject_cameras = cameras.at(action.subject);
    // The frames that every chosen camera has, ascending.
    std::vector<long> frames;
    const Calibrated* absent = nullptr;
    for (const Calibrated& c : subject_cameras) {
      const auto found = rows.find(c.name);
      if (found == rows.end()) {
        absent = &c;
        break;
      }
      std::vector<long> own;
      for (const auto& [frame, unused] : found->second.pose_3d) own.push_back(frame);
      if (&c == &subject_cameras[0]) {
        frames = own;
      } else {
        std::vector<long> both;
        std::set_intersection(frames.begin(), frames.end(), own.begin(), own.end(),
                              std::back_inserter(both));
        frames.swap(both);
      }
    }
    if (absent != nullptr || frames.empty()) {
      scene.warnings.push_back("human36m: " + action.subject + "/" + action.name + " skipped: " +
                               (absent ? "no rows of camera " + absent->name
                                       : std::string("no frame that every camera has")) +
                               " in annot.h5");
      continue;
    }
    std::vector<PinholeCamera<double>> full_cameras;
    double far_depth = 0.2;
    for (const Calibrated& c : subject_cameras) {
      full_cameras.push_back(
          pinhole(c, options.calibration + ": " + action.subject + " camera " + c.name));
      far_depth = std::max(far_depth, 2 * norm(full_cameras.back().center()));
    }
    const Split split = std::count(test_subjects.begin(), test_subjects.end(), action.subject)
                            ? Split::kTest
                            : Split::kTrain;
    int kept = 0;
    for (size_t i = 0; i < frames.size(); i += size_t(options.frame_step)) {
      if (options.max_frames > 0 && kept == options.max_frames) break;
      const long frame = frames[i];
      char number[16];
      std::snprintf(number, sizeof number, "%06ld", frame);
      const std::string instant = action.subject + "/" + action.name + "/" + number;
      const std::vector<Vec3<double>> world = world_joints(
          subject_cameras, rows, frame, annot.string() + ": frame " + number + ": camera ",
          "'s pose/3d, taken to the world by " + options.calibration + ", lies ",
          "; is it " + action.subject + "'s calibration?");
      worst_label = std::max(worst_label, pose_2d_gap(subject_cameras, rows, frame, world));
      std::vector<Vec3<double>> joints;
      for (const Vec3<double>& x : world) joints.push_back(kMetresPerMillimetre * x);
      const int first = int(scene.views.size());
      for (size_t c = 0; c < subject_cameras.size(); ++c) {
        View view;
        view.name = instant + "/" + subject_cameras[c].name;
        const PinholeCamera<double> crop =
            crop_camera(full_cameras[c], width, height, joints, options.body_crop, view.name);
        view.camera = crop;
        if (crop.width != size.width || crop.height != size.height) {
          scale_intrinsics(&view.camera, size.width, size.height);
        }
        view.near_depth = 0.1;
        view.far_depth = far_depth;
        view.time = double(frame) / kHuman36mFrameRate;
        view.time_index = kept;
        view.split = split;
        view.pose = label_joints(joints, std::vector<bool>(joints.size(), true), view.camera);
        view.target = c == 0;
        const fs::path image = image_path(action, subject_cameras[c].name, frame);
        if (!fs::is_regular_file(image)) {
          throw InvalidArgument(image.string() + ": missing (annot.h5 has this frame)");
        }
        plans.push_back({image, &subject_cameras[c], crop, view.camera});
        scene.views.push_back(std::move(view));
        scene.neighbours.emplace_back();
        for (size_t other = 1; c == 0 && other < subject_cameras.size(); ++other) {
          scene.neighbours.back().push_back(first + int(other));
        }
      }
      ++kept;
    }
  }
  if (scene.views.empty()) throw InvalidArgument(source + ": no action has every camera chosen");
  if (worst_label > kLabelNoticePixels) {
    char text[160];
    std::snprintf(text, sizeof text,
                  "human36m: annot.h5's pose/2d lies up to %.1f px from the calibration's "
                  "projection of the joints; the labels are the calibration's",
                  worst_label);
    scene.warnings.push_back(text);
  }
  // The images are read as the shards are written, not held: the whole data set at 256 pixels
  // would take about 150 GB.
  const auto planned = std::make_shared<const std::vector<PlannedView>>(std::move(plans));
  scene.read_rgb = reads_with_progress(
      [calibrations, planned](size_t view) { return read_view_image((*planned)[view]); },
      planned->size(), options.on_image_read);
  validate_scene(scene);
  return scene;
}

}  // namespace mvibr::data
