#!/usr/bin/env bash
# End to end through the CLI: `mvibr prep` on the built-in scene and on the real data sets,
# `mvibr inspect` reading every frame back, h5py reading the shards, and bad input ending in one
# clear line and a non-zero exit with nothing left that looks finished.
#   prep_cli_test.sh MVIBR_BINARY SOURCE_DIR
set -euo pipefail
mvibr=$1
source_dir=$2
source "$source_dir/test/integration/lib.sh"

echo "== built-in synthetic scene"
"$mvibr" prep --out "$work/synthetic" --shards 3 --views 12 --width 32 --height 24
"$mvibr" inspect "$work/synthetic" | tee "$work/inspect"
grep -q "checked .* frames in 3 shard(s): ok" "$work/inspect" || fail "inspect did not check"
"$mvibr" inspect "$work/synthetic/shard-00001-of-00003.h5" | grep -q "frames: ok" ||
  fail "inspect of one shard"
/usr/bin/python3 "$source_dir/test/data/read_with_h5py.py" "$work/synthetic"
h5dump -H "$work/synthetic/shard-00000-of-00003.h5" | grep -q 'DATASET "frames"' ||
  fail "h5dump cannot read a shard"

echo "== from a config file (the command line wins)"
printf 'views = 6\nwidth = 20\nheight = 18\nshards = 2\n' >"$work/prep.txt"
"$mvibr" prep --config "$work/prep.txt" --out "$work/configured" --views 8
"$mvibr" inspect "$work/configured" | grep -q "views: 8 " || fail "config file / command line"

echo "== dynamic synthetic scene"
"$mvibr" prep --out "$work/dynamic" --views 8 --time_steps 3 --width 24 --height 16 --shards 2
"$mvibr" inspect "$work/dynamic" | grep -q "3 time step(s)" || fail "dynamic time steps"

echo "== a monocular video, written as DynIBaR's folder and imported back: the same shards"
"$mvibr" prep --out "$work/video" --rig monocular --time_steps 12 --width 32 --height 24 \
  --shards 2 --dynibar_folder "$work/video_dynibar"
"$mvibr" prep --input "$work/video_dynibar" --out "$work/imported" --shards 2 |
  tee "$work/imported.log"
grep -q "(dynibar, dynamic): 12 views" "$work/imported.log" || fail "dynibar import"
/usr/bin/python3 - "$work/video" "$work/imported" <<'PY'
import h5py, numpy as np, sys
# Every dataset but the frames' names and the depth bounds (DynIBaR's folder keeps each frame's
# bounds; its loader's rule makes them scene-wide), bit for bit; the poses to the last bit of
# the importer's orthonormalisation.
for s in range(2):
    name = "shard-%05d-of-00002.h5" % s
    with h5py.File(sys.argv[1] + "/" + name) as a, h5py.File(sys.argv[2] + "/" + name) as b:
        names = []
        a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        assert "motion/flow" in names and "frames" in names, names
        for n in names:
            if n in ("views/name", "views/near_far"):
                continue
            same = (np.allclose(a[n][()], b[n][()], rtol=0, atol=1e-15) if n == "views/c2w"
                    else np.array_equal(a[n][()], b[n][()]))
            if not same:
                sys.exit("%s: %s differs after the round trip" % (name, n))
PY

echo "== a CMU Panoptic capture (two sequences, three hd cameras, a body a frame), written here"
/usr/bin/python3 - "$work/panoptic" <<'PY'
import json, math, os, sys
from PIL import Image
root = sys.argv[1]
for s, sequence in enumerate(["seq_a", "seq_b"]):
    cameras = []
    for c in range(3):
        a = 2 * math.pi * c / 3
        # Looking at the origin from 300 cm away, the image's y down the world's -z.
        R = [[-math.sin(a), math.cos(a), 0], [0, 0, -1], [-math.cos(a), -math.sin(a), 0]]
        cameras.append({"name": "00_%02d" % c, "type": "hd", "resolution": [32, 24],
                        "K": [[30, 0, 15.5], [0, 30, 11.5], [0, 0, 1]],
                        "distCoef": [-0.2, 0.05, 0, 0, 0], "R": R, "t": [[0], [0], [300]]})
    folder = os.path.join(root, sequence)
    os.makedirs(os.path.join(folder, "hdPose3d_stage1_coco19"))
    with open(os.path.join(folder, "calibration_%s.json" % sequence), "w") as f:
        json.dump({"cameras": cameras}, f)
    for frame in range(3):
        joints = []
        for j in range(19):
            joints += [20 * math.sin(j + frame + s), 20 * math.cos(3 * j), 5 * j - 45, 0.8]
        bodies = [] if frame == 1 else [{"id": 0, "joints19": joints}]
        with open(os.path.join(folder, "hdPose3d_stage1_coco19",
                               "body3DScene_%08d.json" % frame), "w") as f:
            json.dump({"bodies": bodies}, f)
        for camera in cameras:
            os.makedirs(os.path.join(folder, "hdImgs", camera["name"]), exist_ok=True)
            Image.new("RGB", (32, 24), (40, 90 + 40 * frame, 30 * s)).save(os.path.join(
                folder, "hdImgs", camera["name"], "%s_%08d.jpg" % (camera["name"], frame)))
PY
"$mvibr" prep --input panoptic --source "$work/panoptic" --out "$work/panoptic-data" |
  tee "$work/panoptic.out"
grep -q "(panoptic): 12 views of 32x24 (train 6, val 0, test 6)" "$work/panoptic.out" ||
  fail "panoptic import"
grep -q "^warning: panoptic: 2 of 6 frames read had no body" "$work/panoptic.out" ||
  fail "skipped frames not counted"
"$mvibr" inspect "$work/panoptic-data" | tee "$work/panoptic.inspect"
grep -q "skeleton: 19 joints: BodyCenter Neck<BodyCenter Nose<Neck lShoulder<Neck" \
  "$work/panoptic.inspect" || fail "inspect does not show coco19"
grep -q "checked .* frames in 1 shard(s): ok" "$work/panoptic.inspect" || fail "inspect panoptic"
"$mvibr" prep --input panoptic --source "$work/panoptic" --body_crop 0.2 --width 24 \
  --out "$work/panoptic-crops" | tee "$work/panoptic-crops.out"
grep -q "(panoptic): 12 views of 24x24 (train 6, val 0, test 6)" "$work/panoptic-crops.out" ||
  fail "panoptic body crops"
expect_error "calibration_seq_a.json: no hd camera '00_07' (--cameras)" "$mvibr" prep --input panoptic \
  --source "$work/panoptic" --cameras 00_00,00_07 --out "$work/bad-panoptic"
echo "== a Human3.6M processed folder (S1 and S9, two cameras, 32 joints a frame), written here"
/usr/bin/python3 - "$work/h36m" <<'PY'
import math, os, sys
import h5py, numpy as np
from PIL import Image
root = sys.argv[1]
ids, heights = ["54138969", "55011271"], [34, 32]
rotations, centres = [], []
for c in range(2):
    a = math.pi / 2 * c
    # Looking at the origin from 3 m away, image y down the world's -z; R: camera to world.
    forward = np.array([-math.cos(a), -math.sin(a), 0.0])
    down = np.array([0.0, 0.0, -1.0])
    rotations.append(np.stack([np.cross(down, forward), down, forward], axis=1))
    centres.append(-3000 * forward)
os.makedirs(root)
with h5py.File(os.path.join(root, "cameras.h5"), "w") as f:
    for subject in [1, 9]:
        for c in range(2):
            g = f.create_group("subject%d/camera%d" % (subject, c + 1))
            g["R"], g["T"] = rotations[c], centres[c].reshape(3, 1)
            g["f"], g["c"] = np.array([[30.0], [30.0]]), np.array([[15.5], [heights[c] / 2 - 0.5]])
            g["k"], g["p"] = np.array([[-0.1], [0.02], [0.0]]), np.zeros((2, 1))
            g["Name"] = np.array([[ord(x)] for x in ids[c]], dtype=np.float64)
for subject in ["S1", "S9"]:
    folder = os.path.join(root, subject, "Walking-1")
    rows = {"camera": [], "frame": [], "pose/3d": []}
    for c in range(2):
        for frame in [1, 2, 3]:
            joints = np.array([[200 * math.sin(j + frame), 200 * math.cos(3 * j), 60 * j - 900]
                               for j in range(32)])
            rows["camera"].append(int(ids[c]))
            rows["frame"].append(frame)
            rows["pose/3d"].append((joints - centres[c]) @ rotations[c])
            os.makedirs(os.path.join(folder, "imageSequence", ids[c]), exist_ok=True)
            Image.new("RGB", (32, heights[c]), (40, 90 + 40 * frame, 30 * c)).save(os.path.join(
                folder, "imageSequence", ids[c], "img_%06d.jpg" % frame))
    with h5py.File(os.path.join(folder, "annot.h5"), "w") as f:
        for name, values in rows.items():
            f[name] = np.array(values)
PY
"$mvibr" prep --input human36m --source "$work/h36m" --calibration "$work/h36m/cameras.h5" \
  --out "$work/h36m-data" | tee "$work/h36m.out"
grep -q "(human36m): 12 views of 32x32 (train 6, val 0, test 6)" "$work/h36m.out" ||
  fail "human36m import"
"$mvibr" inspect "$work/h36m-data" | tee "$work/h36m.inspect"
grep -q "skeleton: 17 joints: pelvis right_hip<pelvis" "$work/h36m.inspect" ||
  fail "inspect does not show the 17 joints"
grep -q "checked .* frames in 1 shard(s): ok" "$work/h36m.inspect" || fail "inspect human36m"
"$mvibr" prep --input human36m --source "$work/h36m" --calibration "$work/h36m/cameras.h5" \
  --body_crop 0.2 --width 24 --out "$work/h36m-crops" | tee "$work/h36m-crops.out"
grep -q "(human36m): 12 views of 24x24 (train 6, val 0, test 6)" "$work/h36m-crops.out" ||
  fail "human36m body crops"
expect_error "cameras.h5: S1 has no camera 60457274 (--cameras)" "$mvibr" prep \
  --input human36m --source "$work/h36m" --calibration "$work/h36m/cameras.h5" \
  --cameras 54138969,60457274 --out "$work/bad-h36m"
expect_error "--calibration is for --input human36m" "$mvibr" prep --input panoptic \
  --source "$work/panoptic" --calibration "$work/h36m/cameras.h5" --out "$work/bad-h36m"
[[ ! -e $work/bad-h36m ]] || fail "a refused human36m import wrote its output folder"
expect_error "--frame_step is for --input panoptic and human36m" \
  "$mvibr" prep --out "$work/bad-panoptic" --frame_step 2
[[ ! -e $work/bad-panoptic ]] || fail "a refused panoptic import wrote its output folder"

echo "== bad input"
expect_error "no such" "$mvibr" prep --input "$work/does-not-exist" --out "$work/bad1"
[[ ! -e "$work/bad1/scene.h5" ]] || fail "bad prep left scene.h5"
expect_error "--shards" "$mvibr" prep --out "$work/bad2" --views 4 --shards 9
[[ ! -e "$work/bad2/scene.h5" ]] || fail "bad prep left scene.h5"
expect_error "width" "$mvibr" prep --out "$work/bad3" --width 1
expect_error "unrecognised option" "$mvibr" prep --out "$work/bad4" --frobnicate 3
expect_error "mvibr prep needs --out" "$mvibr" prep
expect_error "not a DynIBaR folder" "$mvibr" prep --input "$work/synthetic" --format dynibar \
  --out "$work/bad6"
expect_error "not one video in time order" "$mvibr" prep --out "$work/bad7" --views 2 \
  --time_steps 3 --width 8 --height 6 --dynibar_folder "$work/bad7_dynibar"
[[ ! -e "$work/bad7/scene.h5" ]] || fail "a refused DynIBaR export left scene.h5"
expect_error "--factor must be at least 1, got -2" "$mvibr" prep --out "$work/bad5" --input "$work" \
  --factor -2
expect_error "--max_views must be at least 0, got -3" "$mvibr" prep --out "$work/bad5" \
  --input "$work" --max_views -3
expect_error "--shards must be at least 1, got 0" "$mvibr" prep --out "$work/bad5" --shards 0
expect_error "--llffhold must be at least 0" "$mvibr" prep --out "$work/bad5" --llffhold -1
expect_error "--compress must be 0 to 9, got 11" "$mvibr" prep --out "$work/bad5" --compress 11
expect_error "--near must be positive" "$mvibr" prep --out "$work/bad5" --near -1
expect_error "--near must be less than --far" "$mvibr" prep --out "$work/bad5" --near 3 --far 2
expect_error "--test_ids, --factor and --strict are for imported scenes" "$mvibr" prep \
  --out "$work/bad5" --factor 2
[[ ! -e $work/bad5 ]] || fail "a refused prep wrote its output folder"
cp "$work/synthetic/shard-00000-of-00003.h5" "$work/truncated.h5"
truncate -s 2000 "$work/truncated.h5"
expect_error "truncated.h5" "$mvibr" inspect "$work/truncated.h5"
expect_error "cannot read" "$mvibr" inspect "$work/nothing-here.h5"

echo "== real data sets"
need_dataset nerf_synthetic_lego_400
lego=$dataset
need_dataset llff_fern
fern=$dataset
need_dataset dnerf_lego_tiny
dnerf=$dataset
"$mvibr" prep --input "$lego" --out "$work/lego" --shards 2 \
  --max_views 6
"$mvibr" inspect "$work/lego" | grep -q "views: 18 (train 6, val 6, test 6)" || fail "lego counts"
# All 400 frames, read with progress and written 100 wide.
"$mvibr" prep --input "$lego" --out "$work/lego100" --width 100 >"$work/lego100.out" \
  2>"$work/lego100.err"
[[ $(grep -c "^reading images: [0-9]* of 400$" "$work/lego100.err") -eq 10 ]] ||
  fail "no progress while reading 400 images: $(cat "$work/lego100.err")"
grep -q "400 views of 100x100" "$work/lego100.out" || fail "lego --width 100: $(cat "$work/lego100.out")"
"$mvibr" prep --input "$fern" --factor 16 --out "$work/fern16" | tee "$work/fern16.out"
grep -q "20 views of 252x189" "$work/fern16.out" || fail "fern --factor 16 is not 252x189"
grep -q "^depth bounds: near .* (from LLFF's poses_bounds.npy" "$work/fern16.out" ||
  fail "prep does not say where the depth bounds came from"
/usr/bin/python3 -c '
import h5py, sys
with h5py.File(sys.argv[1] + "/scene.h5", "r") as f:
    assert f.attrs["depth_bounds_from"].decode().startswith("LLFF"), f.attrs["depth_bounds_from"]
print("fern at 1/16: depth bounds stored with their source")
' "$work/fern16"
"$mvibr" inspect "$work/fern16" | grep -q "fx 203.8 fy 203.8 cx 125.5 cy 94" ||
  fail "fern's intrinsics at 1/16: $("$mvibr" inspect "$work/fern16")"
expect_error "--height is for the built-in scene" "$mvibr" prep --input "$fern" --out "$work/bad6" \
  --height 100
expect_error "--width and --factor: give one of them" "$mvibr" prep --input "$fern" \
  --out "$work/bad6" --width 100 --factor 2
expect_error "names no view of 20" "$mvibr" prep --input "$fern" --out "$work/bad6" --factor 8 \
  --test_ids 3,99
[[ ! -e $work/bad6 ]] || fail "a refused prep wrote its output folder"
"$mvibr" prep --input "$fern" --factor 8 --out "$work/fern" --shards 2
"$mvibr" inspect "$work/fern" | grep -q "views: 20 (train 17, val 0, test 3)" || fail "fern counts"
/usr/bin/python3 "$source_dir/test/data/read_with_h5py.py" "$work/fern"
"$mvibr" prep --input "$dnerf/tiny_dnerf_data.npz" --out "$work/dlego"
"$mvibr" inspect "$work/dlego" | grep -q "dynamic" || fail "dnerf is not dynamic"

echo "prep_cli_test: all passed"
