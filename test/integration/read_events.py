"""Reads a run's TensorBoard event files with TensorBoard's own reader and checks them against its
metrics.jsonl: the tags, their steps and values, the first event's file_version, every record
read (none dropped for a bad CRC), and the held-out images' size.

    read_events.py RUN_DIR WIDTH HEIGHT RANKS

Run with the Python that has tensorboard (scripts/setup.sh puts it in a venv).
"""
import glob
import io
import json
import math
import os
import struct
import sys

from PIL import Image
from tensorboard.backend.event_processing import event_accumulator, event_file_loader

run_dir, width, height, ranks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

# TensorBoard tag -> metrics.jsonl key, for the lines logged every i_print steps and at validation.
TRAIN_TAGS = {
    "loss/total": "loss", "loss/coarse": "mse_coarse", "loss/fine": "mse_fine",
    "train/psnr": "psnr", "train/grad_norm": "grad_norm",
    "lr/feature": "lr_feature", "lr/mlp": "lr_mlp",
    "throughput/rays_per_second": "rays_per_second",
    "throughput/steps_per_second": "steps_per_second",
    "time/step_seconds": "step_seconds", "time/data_wait_fraction": "data_wait_fraction",
    "time/busy_seconds_min": "busy_seconds_min", "time/busy_seconds_max": "busy_seconds_max",
    "time/imbalance": "imbalance",
    "allreduce/seconds": "allreduce_seconds",
    "allreduce/exposed_seconds": "allreduce_exposed_seconds",
    "allreduce/hidden_fraction": "allreduce_hidden_fraction",
}
HELDOUT_TAGS = {"heldout/psnr": "heldout_psnr", "heldout/ssim": "heldout_ssim"}


def fail(message):
    sys.exit(f"read_events.py: {message}")


lines = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
train_lines = [line for line in lines if "loss" in line]
heldout_lines = [line for line in lines if "heldout_psnr" in line]
if not train_lines or not heldout_lines:
    fail(f"metrics.jsonl lacks training or held-out lines: {lines}")

files = glob.glob(os.path.join(run_dir, "tb", "events.out.tfevents.*"))
if len(files) != 1:
    fail(f"expected one event file in {run_dir}/tb, found {files}")

# Records as framed in the file, counted without TensorBoard: its loader stops at a record whose
# CRC fails, so fewer events than records means a framing or checksum error.
records = 0
with open(files[0], "rb") as f:
    data = f.read()
at = 0
while at < len(data):
    (length,) = struct.unpack_from("<Q", data, at)
    at += 12 + length + 4
    records += 1
if at != len(data):
    fail(f"the last record runs past the end of the file ({at} > {len(data)})")
events = list(event_file_loader.EventFileLoader(files[0]).Load())
if len(events) != records:
    fail(f"TensorBoard read {len(events)} of {records} records: a CRC or the framing is wrong")
if events[0].file_version != "brain.Event:2":
    fail(f"first event is not the file version: {events[0]}")

acc = event_accumulator.EventAccumulator(
    os.path.join(run_dir, "tb"),
    size_guidance={event_accumulator.SCALARS: 0, event_accumulator.IMAGES: 0})
acc.Reload()
tags = acc.Tags()
expected_tags = set(TRAIN_TAGS) | set(HELDOUT_TAGS)
if set(tags["scalars"]) != expected_tags:
    fail(f"scalar tags {sorted(tags['scalars'])}, expected {sorted(expected_tags)}")
if tags["images"] != ["heldout/rgb"]:
    fail(f"image tags {tags['images']}")


def check(tag, key, source):
    scalars = acc.Scalars(tag)
    steps = [e.step for e in scalars]
    if steps != [line["step"] for line in source]:
        fail(f"{tag}: steps {steps}, metrics.jsonl has {[line['step'] for line in source]}")
    for event, line in zip(scalars, source):
        # TensorBoard keeps a float32: equal to the logged double to float precision.
        if not math.isclose(event.value, line[key], rel_tol=1e-6, abs_tol=1e-30):
            fail(f"{tag} at step {event.step}: {event.value} in TensorBoard, {line[key]} logged")


for tag, key in TRAIN_TAGS.items():
    check(tag, key, train_lines)
for tag, key in HELDOUT_TAGS.items():
    check(tag, key, heldout_lines)

# The logged values mean what their names say.
for line in train_lines:
    step = line["step"]
    if not math.isclose(line["loss"], line["mse_coarse"] + line["mse_fine"], rel_tol=1e-12):
        fail(f"step {step}: loss is not coarse + fine: {line}")
    if not math.isclose(line["psnr"], -10 * math.log10(line["mse_fine"]), rel_tol=1e-9):
        fail(f"step {step}: psnr is not that of the fine loss: {line}")
    if not math.isclose(line["steps_per_second"] * line["step_seconds"], 1, rel_tol=1e-9):
        fail(f"step {step}: steps/s is not 1 / step time: {line}")
    if not math.isclose(line["rays_per_second"], 32 * ranks / line["step_seconds"], rel_tol=1e-9):
        fail(f"step {step}: rays/s is not the global batch over the step time: {line}")
    if line["ranks"] != ranks or not 0 <= line["slowest_rank"] < ranks:
        fail(f"step {step}: ranks: {line}")
    if not 0 <= line["data_wait_fraction"] <= 1 or not 0 <= line["allreduce_hidden_fraction"] <= 1:
        fail(f"step {step}: a fraction outside [0, 1]: {line}")
    if not 0 < line["busy_seconds_min"] <= line["busy_seconds_max"]:
        fail(f"step {step}: busy times: {line}")
    imbalance = line["busy_seconds_max"] / line["busy_seconds_min"] - 1
    if not math.isclose(line["imbalance"], imbalance, rel_tol=1e-9, abs_tol=1e-12):
        fail(f"step {step}: imbalance is not max / min - 1: {line}")
    if ranks == 1 and line["imbalance"] != 0:
        fail(f"step {step}: one rank, yet an imbalance: {line}")
    # The config's learning rates (no decay within these few steps), scaled by nothing.
    if line["lr_feature"] != 0.001 or line["lr_mlp"] != 0.0005:
        fail(f"step {step}: learning rates {line['lr_feature']}, {line['lr_mlp']}")

images = acc.Images("heldout/rgb")
if [e.step for e in images] != [line["step"] for line in heldout_lines]:
    fail(f"images at steps {[e.step for e in images]}, validations at "
         f"{[line['step'] for line in heldout_lines]}")
for event in images:
    image = Image.open(io.BytesIO(event.encoded_image_string))
    image.load()  # decodes every pixel: a broken PNG raises here
    if image.format != "PNG" or image.mode != "RGB" or image.size != (width, height):
        fail(f"image at step {event.step}: {image.format} {image.mode} {image.size}")
    if (event.width, event.height) != (width, height):
        fail(f"image at step {event.step}: the event says {event.width}x{event.height}")
    if len(set(image.getdata())) < 10:
        fail(f"image at step {event.step} is nearly uniform: not a rendering")

print(f"tensorboard read {records} events: {len(expected_tags)} scalar tags at steps "
      f"{[line['step'] for line in train_lines]}, {len(images)} {width}x{height} images; "
      "values match metrics.jsonl")
