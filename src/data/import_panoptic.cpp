// CMU Panoptic Studio sequences as a pose data set (panoptic.h). The layout, the calibration's
// fields, the distortion model and coco19's joints are those of the Panoptic toolbox
// (CMU-Perceptual-Computing-Lab/panoptic-toolbox: README.md, python/panutils.py projectPoints,
// python/demo_3Dkeypoints_reprojection_hd.py). Every file is checked before anything is taken
// from it; nlohmann's parser refuses NaN, Infinity and overflowing numbers as invalid JSON.
#include "mvibr/data/panoptic.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "import_common.h"
#include "mvibr/core/error.h"
#include "mvibr/data/downscale.h"
#include "mvibr/data/shards.h"
#include "mvibr/data/undistort.h"

namespace mvibr::data {

// Panoptic's order is Neck, Nose, BodyCenter, lShoulder, ...; BodyCenter moves to the front.
const int kPanopticJointOrder[kPanopticJoints] = {2,  0,  1,  3,  4,  5,  6,  7,  8, 9,
                                                  10, 11, 12, 13, 14, 15, 16, 17, 18};
const char* const kPanopticJointNames[kPanopticJoints] = {
    "BodyCenter", "Neck",   "Nose",      "lShoulder", "lElbow", "lWrist", "lHip",
    "lKnee",      "lAnkle", "rShoulder", "rElbow",    "rWrist", "rHip",   "rKnee",
    "rAnkle",     "lEye",   "lEar",      "rEye",      "rEar"};
// The toolbox's body_edges, and nose-eye-ear on each side (OpenPose's, which it omits).
const int kPanopticParents[kPanopticJoints] = {-1, 0,  1, 1,  3,  4, 0,  6, 7, 1,
                                               9,  10, 0, 12, 13, 2, 15, 2, 17};

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kBodyFolder = "hdPose3d_stage1_coco19";
constexpr double kHdFrameRate = 29.97;
constexpr double kMetresPerCentimetre = 0.01;
constexpr double kMaxCoordinate = 1e5;  // centimetres: a kilometre from the origin
constexpr int kBodyValues = 4 * kPanopticJoints;

struct HdCamera {
  std::string name;
  PinholeCamera<double> camera;  // the calibration's, at its resolution, in metres
  Distortion distortion;
};

struct Sequence {
  fs::path folder;
  std::string name;
  std::string calibration;        // its file
  std::vector<HdCamera> cameras;  // those imported, in --cameras' or the calibration's order
};

json read_json(const std::string& path) {
  try {
    return json::parse(read_text_file(path));
  } catch (const json::exception& e) {
    throw InvalidArgument(path + ": not valid JSON (" + e.what() + ")");
  }
}

// The numbers of `value`, a number or arrays of them nested at most `depth` deep, in order.
bool collect_numbers(const json& value, int depth, std::vector<double>* out) {
  if (value.is_number()) {
    out->push_back(value.get<double>());
    return true;
  }
  if (!value.is_array() || depth == 0) return false;
  for (const json& item : value) {
    if (!collect_numbers(item, depth - 1, out)) return false;
  }
  return true;
}

// Field `key` of a calibration camera: `count` numbers, flat or as rows (K 3x3, t 3x1, ...).
std::vector<double> numbers_of(const json& camera, const char* key, size_t count,
                               const std::string& where) {
  std::vector<double> values;
  if (!camera.contains(key) || !collect_numbers(camera[key], 2, &values) ||
      values.size() != count) {
    throw InvalidArgument(where + ": '" + key + "' must be " + std::to_string(count) + " numbers");
  }
  return values;
}

HdCamera read_hd_camera(const json& entry, const std::string& where) {
  HdCamera hd;
  hd.name = entry["name"].get<std::string>();
  const std::vector<double> resolution = numbers_of(entry, "resolution", 2, where);
  const std::vector<double> k = numbers_of(entry, "K", 9, where);
  const std::vector<double> d = numbers_of(entry, "distCoef", 5, where);
  const std::vector<double> r = numbers_of(entry, "R", 9, where);
  const std::vector<double> t = numbers_of(entry, "t", 3, where);
  for (const double side : resolution) {
    if (side != std::floor(side) || side < 2 || side > double(kMaxImageSide)) {
      throw InvalidArgument(where + ": resolution must be two whole numbers in [2, " +
                            std::to_string(kMaxImageSide) + "]");
    }
  }
  if (!(k[0] > 0 && k[4] > 0) || k[1] != 0 || k[3] != 0 || k[6] != 0 || k[7] != 0 || k[8] != 1) {
    throw InvalidArgument(where +
                          ": K must be [[fx, 0, cx], [0, fy, cy], [0, 0, 1]] with fx, fy > 0");
  }
  PinholeCamera<double>& c = hd.camera;
  c.width = int(resolution[0]);
  c.height = int(resolution[1]);
  c.fx = k[0], c.fy = k[4], c.cx = k[2], c.cy = k[5];
  // x_camera = R x_world + t: camera-to-world is R^T and -R^T t, in metres.
  double c2w[12];
  for (int row = 0; row < 3; ++row) {
    for (int col = 0; col < 3; ++col) c2w[row * 4 + col] = r[size_t(col * 3 + row)];
    c2w[row * 4 + 3] = 0;
    for (int i = 0; i < 3; ++i) c2w[row * 4 + 3] -= r[size_t(i * 3 + row)] * t[size_t(i)];
    c2w[row * 4 + 3] *= kMetresPerCentimetre;
  }
  set_pose(&c, c2w, where + " (R, t)");
  hd.distortion = {d[0], d[1], d[4], d[2], d[3]};  // distCoef is [k1, k2, p1, p2, k3]
  return hd;
}

// Every hd camera of a calibration file, in its order.
std::vector<HdCamera> read_calibration(const std::string& path) {
  const json root = read_json(path);
  if (!root.is_object() || !root.contains("cameras") || !root["cameras"].is_array()) {
    throw InvalidArgument(path + ": no 'cameras' list");
  }
  std::vector<HdCamera> cameras;
  for (size_t i = 0; i < root["cameras"].size(); ++i) {
    const json& entry = root["cameras"][i];
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
        !entry.contains("type") || !entry["type"].is_string()) {
      throw InvalidArgument(path + ": camera " + std::to_string(i) +
                            " needs a 'name' and a 'type' (strings)");
    }
    if (entry["type"] != "hd") continue;
    const std::string name = entry["name"].get<std::string>(), where = path + ": camera " + name;
    for (const HdCamera& other : cameras) {
      if (other.name == name) throw InvalidArgument(where + " is listed twice");
    }
    cameras.push_back(read_hd_camera(entry, where));
  }
  if (cameras.empty()) throw InvalidArgument(path + ": no hd cameras");
  return cameras;
}

// calibration_<folder>.json, else the folder's only calibration_*.json; empty when none.
std::string find_calibration(const fs::path& folder) {
  const fs::path named = folder / ("calibration_" + directory_name(folder.string()) + ".json");
  if (fs::is_regular_file(named)) return named.string();
  std::vector<std::string> found;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.rfind("calibration_", 0) == 0 && name.size() > 17 &&
        name.compare(name.size() - 5, 5, ".json") == 0) {
      found.push_back(entry.path().string());
    }
  }
  if (found.size() > 1) {
    throw InvalidArgument(folder.string() + ": several calibration_*.json and none named " +
                          named.filename().string());
  }
  return found.empty() ? "" : found[0];
}

// The source itself when it is a sequence folder, else its sub-folders that are, by name.
std::vector<Sequence> find_sequences(const std::string& source) {
  const fs::path root = fs::path(source).lexically_normal();
  if (!fs::is_directory(root)) throw InvalidArgument(source + ": no such folder (--source)");
  std::vector<fs::path> folders{root};
  if (find_calibration(root).empty()) {
    folders.clear();
    for (const fs::directory_entry& entry : fs::directory_iterator(root)) {
      if (entry.is_directory() && !find_calibration(entry.path()).empty()) {
        folders.push_back(entry.path());
      }
    }
    std::sort(folders.begin(), folders.end());
  }
  if (folders.empty()) {
    throw InvalidArgument(source +
                          ": not a Panoptic folder (no calibration_*.json in it or in its "
                          "sub-folders)");
  }
  std::vector<Sequence> sequences;
  for (const fs::path& folder : folders) {
    sequences.push_back({folder, directory_name(folder.string()), find_calibration(folder), {}});
  }
  return sequences;
}

fs::path image_folder(const Sequence& sequence, const std::string& camera) {
  return sequence.folder / "hdImgs" / camera;
}

// The hd cameras to import: --cameras, each in the calibration with an image folder, else every
// hd camera with one; at least 2, of one resolution.
std::vector<HdCamera> choose_cameras(const Sequence& sequence, const PanopticOptions& options) {
  const std::vector<HdCamera> all = read_calibration(sequence.calibration);
  std::vector<HdCamera> chosen;
  if (options.cameras.empty()) {
    for (const HdCamera& hd : all) {
      if (fs::is_directory(image_folder(sequence, hd.name))) chosen.push_back(hd);
    }
  }
  for (const std::string& name : options.cameras) {
    if (std::count(options.cameras.begin(), options.cameras.end(), name) > 1) {
      throw InvalidArgument("--cameras names " + name + " twice");
    }
    const auto found =
        std::find_if(all.begin(), all.end(), [&](const HdCamera& hd) { return hd.name == name; });
    if (found == all.end()) {
      throw InvalidArgument(sequence.calibration + ": no hd camera '" + name + "' (--cameras)");
    }
    if (!fs::is_directory(image_folder(sequence, name))) {
      throw InvalidArgument(image_folder(sequence, name).string() +
                            ": no such folder (the images of camera " + name + ", --cameras)");
    }
    chosen.push_back(*found);
  }
  if (chosen.size() < 2) {
    throw InvalidArgument((sequence.folder / "hdImgs").string() + ": " +
                          std::to_string(chosen.size()) +
                          " hd camera(s) of the calibration have images; a pose sample needs 2");
  }
  for (const HdCamera& hd : chosen) {
    const PinholeCamera<double>&a = chosen[0].camera, &b = hd.camera;
    if (a.width != b.width || a.height != b.height) {
      throw InvalidArgument(sequence.calibration + ": camera " + hd.name + " is " +
                            size_text(b.width, b.height) + ", camera " + chosen[0].name + " " +
                            size_text(a.width, a.height) + "; the views of a scene share a size");
    }
  }
  return chosen;
}

std::string camera_names(const std::vector<HdCamera>& cameras) {
  std::string names;
  for (const HdCamera& hd : cameras) names += (names.empty() ? "" : ",") + hd.name;
  return names;
}

// The frame numbers that have a body file, ascending.
std::vector<long> body_frames(const Sequence& sequence) {
  const fs::path folder = sequence.folder / kBodyFolder;
  if (!fs::is_directory(folder)) {
    throw InvalidArgument(folder.string() + ": no such folder (the sequence's 3D bodies)");
  }
  const std::string prefix = "body3DScene_", suffix = ".json";
  std::vector<long> frames;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const std::string digits =
        name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    frames.push_back(std::stol(digits));
  }
  if (frames.empty()) throw InvalidArgument(folder.string() + ": no body3DScene_*.json files");
  std::sort(frames.begin(), frames.end());
  return frames;
}

std::string numbered(long frame) {
  char digits[16];
  std::snprintf(digits, sizeof digits, "%08ld", frame);
  return digits;
}

// The joints19 of the frame's body `wanted` (-1: its first), after checking every body of the
// file; empty when it has no such body.
std::vector<double> read_body(const std::string& path, int wanted) {
  const json root = read_json(path);
  if (!root.is_object() || !root.contains("bodies") || !root["bodies"].is_array()) {
    throw InvalidArgument(path + ": no 'bodies' list");
  }
  std::vector<double> chosen;
  for (size_t b = 0; b < root["bodies"].size(); ++b) {
    const json& body = root["bodies"][b];
    if (!body.is_object() || !body.contains("id") || !body["id"].is_number_integer()) {
      throw InvalidArgument(path + ": body " + std::to_string(b) + " has no integer 'id'");
    }
    const std::string which = path + ": body " + std::to_string(body["id"].get<long long>());
    std::vector<double> values;
    if (!body.contains("joints19") || !body["joints19"].is_array() ||
        !collect_numbers(body["joints19"], 1, &values)) {
      throw InvalidArgument(which + " has no 'joints19' list of numbers");
    }
    if (values.size() != kBodyValues) {
      throw InvalidArgument(which + " has " +
                            (values.size() % 4 == 0
                                 ? std::to_string(values.size() / 4) + " joints (" +
                                       std::to_string(values.size()) + " values)"
                                 : std::to_string(values.size()) + " values") +
                            ", coco19 needs 19 (x, y, z, confidence each)");
    }
    for (size_t i = 0; i < values.size(); ++i) {
      if (i % 4 != 3 && std::abs(values[i]) > kMaxCoordinate) {
        throw InvalidArgument(which + " joint " + std::to_string(i / 4) +
                              " lies over a kilometre from the origin");
      }
    }
    if (chosen.empty() && (wanted < 0 || body["id"] == wanted)) chosen = values;
  }
  return chosen;
}

fs::path image_path(const Sequence& sequence, const std::string& camera, long frame) {
  const fs::path stem = image_folder(sequence, camera) / (camera + "_" + numbered(frame));
  const fs::path png = fs::path(stem.string() + ".png");
  return fs::is_regular_file(png) ? png : fs::path(stem.string() + ".jpg");
}

// A view to read: its sequence, hd camera and frame; the body crop at the photograph's scale
// (unset without one) and the view's camera, at the output size.
struct PlannedView {
  size_t sequence, camera;
  long frame;
  std::optional<PinholeCamera<double>> crop;
  PinholeCamera<double> view_camera;
};

// One camera's image of a frame: undistorted into the pinhole image of its K, then brought to the
// view's size (area averaging), or cut out as the view's body crop.
std::vector<uint8_t> read_view_image(const Sequence& sequence, const PlannedView& plan) {
  const HdCamera& hd = sequence.cameras[plan.camera];
  const PinholeCamera<double>& camera = plan.view_camera;
  const fs::path path = image_path(sequence, hd.name, plan.frame);
  const Image image = load_image(path.string());
  const PinholeCamera<double>& full = hd.camera;
  if (image.width != full.width || image.height != full.height) {
    throw InvalidArgument(path.string() + ": " + size_text(image.width, image.height) +
                          " pixels, but " + sequence.calibration + " gives camera " + hd.name +
                          " " + size_text(full.width, full.height));
  }
  std::vector<uint8_t> rgb = composite_to_rgb(image, 0);
  if (plan.crop) return crop_view_rgb(rgb, full, hd.distortion, *plan.crop, camera);
  if (!hd.distortion.is_identity()) rgb = undistort_rgb(rgb, full, hd.distortion, 0);
  if (camera.width == full.width) return rgb;
  return downscale_area(rgb, full.width, full.height, 3, camera.width, camera.height);
}

// A body's joints19 (centimetres, Panoptic's order) in mvibr's order, in metres, and which are
// confident.
struct Body {
  std::vector<Vec3<double>> joints;
  std::vector<bool> confident;

  Body(const std::vector<double>& joints19, double min_confidence) {
    for (const int p : kPanopticJointOrder) {
      const double* joint = &joints19[size_t(4 * p)];
      joints.push_back({kMetresPerCentimetre * joint[0], kMetresPerCentimetre * joint[1],
                        kMetresPerCentimetre * joint[2]});
      confident.push_back(joint[3] > min_confidence);
    }
  }
  std::vector<Vec3<double>> confident_joints() const {
    std::vector<Vec3<double>> kept;
    for (size_t j = 0; j < joints.size(); ++j) {
      if (confident[j]) kept.push_back(joints[j]);
    }
    return kept;
  }
};

}  // namespace

Scene import_panoptic(const std::string& source, const PanopticOptions& options) {
  if (options.frame_step < 1 || options.max_frames < 0 || options.test_sequences < -1 ||
      !(options.body_crop >= 0 && options.body_crop <= 10)) {
    throw InvalidArgument(
        "panoptic: --frame_step must be at least 1, --max_frames and "
        "--test_sequences at least 0, --body_crop in [0, 10]");
  }
  // The views to read point into it, so Scene::read_rgb keeps it.
  const auto found = std::make_shared<std::vector<Sequence>>(find_sequences(source));
  std::vector<Sequence>& sequences = *found;
  const int n_test =
      options.test_sequences >= 0 ? options.test_sequences : (sequences.size() > 1 ? 1 : 0);
  if (n_test >= int(sequences.size())) {
    throw InvalidArgument(source + ": --test_sequences " + std::to_string(n_test) +
                          " leaves none of its " + std::to_string(sequences.size()) +
                          " sequence(s) to train on");
  }
  for (Sequence& sequence : sequences) {
    sequence.cameras = choose_cameras(sequence, options);
    const Sequence& first = sequences[0];
    const PinholeCamera<double>&a = first.cameras[0].camera, &b = sequence.cameras[0].camera;
    if (sequence.cameras.size() != first.cameras.size()) {
      throw InvalidArgument(
          (sequence.folder / "hdImgs").string() + ": " + std::to_string(sequence.cameras.size()) +
          " hd cameras with images (" + camera_names(sequence.cameras) + "), but " + first.name +
          " has " + std::to_string(first.cameras.size()) + " (" + camera_names(first.cameras) +
          "); choose the same number with --cameras");
    }
    if (a.width != b.width || a.height != b.height) {
      throw InvalidArgument(sequence.calibration + ": its cameras are " +
                            size_text(b.width, b.height) + ", " + first.name + "'s " +
                            size_text(a.width, a.height) + "; the views of a scene share a size");
    }
  }
  const PinholeCamera<double>& photograph = sequences[0].cameras[0].camera;
  const FrameSize size =
      options.body_crop > 0
          ? body_crop_size("panoptic", options.width, options.height)
          : pose_output_size(photograph.width, photograph.height, options.width, options.height);

  Scene scene;
  scene.name = sequences.size() == 1 ? sequences[0].name : directory_name(source);
  scene.source_format = "panoptic";
  scene.depth_bounds_from =
      "twice the farthest camera's distance from the origin (the pose model "
      "does not use them)";
  scene.skeleton.assign(kPanopticParents, kPanopticParents + kPanopticJoints);
  scene.joint_names.assign(kPanopticJointNames, kPanopticJointNames + kPanopticJoints);
  long frames_read = 0, frames_skipped = 0;
  std::vector<PlannedView> plans;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const Sequence& sequence = sequences[s];
    std::vector<PinholeCamera<double>> cameras;
    double far_depth = 0.2;
    for (const HdCamera& hd : sequence.cameras) {
      cameras.push_back(hd.camera);
      if (size.width != hd.camera.width) scale_intrinsics(&cameras.back(), size.width, size.height);
      far_depth = std::max(far_depth, 2 * norm(hd.camera.center()));
    }
    const Split split = int(s) >= int(sequences.size()) - n_test ? Split::kTest : Split::kTrain;
    const std::vector<long> frames = body_frames(sequence);
    int kept = 0;
    for (size_t i = 0; i < frames.size(); i += size_t(options.frame_step)) {
      if (options.max_frames > 0 && kept == options.max_frames) break;
      const fs::path body_file =
          sequence.folder / kBodyFolder / ("body3DScene_" + numbered(frames[i]) + ".json");
      const std::vector<double> joints19 = read_body(body_file.string(), options.body);
      ++frames_read;
      if (joints19.empty()) {
        ++frames_skipped;
        continue;
      }
      const Body body(joints19, options.min_confidence);
      const std::vector<Vec3<double>> boxed = body.confident_joints();
      if (options.body_crop > 0 && boxed.empty()) {
        char threshold[32];
        std::snprintf(threshold, sizeof threshold, "%g", options.min_confidence);
        throw InvalidArgument(body_file.string() + ": the body has no joint of confidence above " +
                              threshold + " to crop about (--body_crop)");
      }
      const int first = int(scene.views.size());
      for (size_t c = 0; c < cameras.size(); ++c) {
        View view;
        view.name = sequence.name + "/" + numbered(frames[i]) + "/" + sequence.cameras[c].name;
        view.camera = cameras[c];
        std::optional<PinholeCamera<double>> crop;
        if (options.body_crop > 0) {
          // The crop's size is the joints' box's (0 x 0: no centre crop).
          crop = crop_camera(sequence.cameras[c].camera, 0, 0, boxed, options.body_crop, view.name);
          view.camera = *crop;
          scale_intrinsics(&view.camera, size.width, size.height);
        }
        view.near_depth = 0.1;
        view.far_depth = far_depth;
        view.time = double(frames[i]) / kHdFrameRate;
        view.time_index = kept;
        view.split = split;
        const fs::path image = image_path(sequence, sequence.cameras[c].name, frames[i]);
        if (!fs::is_regular_file(image)) {
          throw InvalidArgument(image.string() + ": missing (camera " + sequence.cameras[c].name +
                                " of frame " + std::to_string(frames[i]) +
                                ", which has a 3D body)");
        }
        plans.push_back({s, c, frames[i], crop, view.camera});
        view.pose = label_joints(body.joints, body.confident, view.camera);
        view.target = c == 0;
        scene.views.push_back(std::move(view));
        scene.neighbours.emplace_back();
        for (size_t other = 1; c == 0 && other < cameras.size(); ++other) {
          scene.neighbours.back().push_back(first + int(other));
        }
      }
      ++kept;
    }
    if (kept == 0) {
      throw InvalidArgument((sequence.folder / kBodyFolder).string() +
                            ": none of the frames read " + "has a body" +
                            (options.body >= 0 ? " with id " + std::to_string(options.body) : ""));
    }
  }
  if (frames_skipped > 0) {
    scene.warnings.push_back("panoptic: " + std::to_string(frames_skipped) + " of " +
                             std::to_string(frames_read) + " frames read had no body" +
                             (options.body >= 0 ? " with id " + std::to_string(options.body) : "") +
                             " and were skipped");
  }
  // The images are read as the shards are written, not held (a capture's 31 hd cameras give
  // tens of thousands of frames).
  const auto planned = std::make_shared<const std::vector<PlannedView>>(std::move(plans));
  scene.read_rgb = reads_with_progress(
      [found, planned](size_t view) {
        const PlannedView& plan = (*planned)[view];
        return read_view_image((*found)[plan.sequence], plan);
      },
      planned->size(), options.on_image_read);
  validate_scene(scene);
  return scene;
}

}  // namespace mvibr::data
