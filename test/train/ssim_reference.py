#!/usr/bin/python3
"""SSIM as mip-NeRF's compute_ssim defines it, in numpy, the oracle of evaluate_test.cpp.

  ssim_reference.py FILE HEIGHT WIDTH PAIRS

FILE holds PAIRS pairs of float32 [HEIGHT, WIDTH, 3] images back to back (a0, b0, a1, b1, ...);
prints one SSIM per pair, with 17 significant digits.
"""
import sys

import numpy as np


def ssim(a, b, filter_size=11, filter_sigma=1.5, k1=0.01, k2=0.03, max_val=1.0):
    hw = filter_size // 2
    f = np.exp(-0.5 * ((np.arange(filter_size) - hw) / filter_sigma) ** 2)
    f /= f.sum()

    def filt(z):  # separable, 'valid' only
        z = np.lib.stride_tricks.sliding_window_view(z, filter_size, axis=0) @ f
        return np.lib.stride_tricks.sliding_window_view(z, filter_size, axis=1) @ f

    mu0, mu1 = filt(a), filt(b)
    sigma00 = np.maximum(0.0, filt(a * a) - mu0 * mu0)
    sigma11 = np.maximum(0.0, filt(b * b) - mu1 * mu1)
    sigma01 = filt(a * b) - mu0 * mu1
    sigma01 = np.sign(sigma01) * np.minimum(np.sqrt(sigma00 * sigma11), np.abs(sigma01))
    c1, c2 = (k1 * max_val) ** 2, (k2 * max_val) ** 2
    numer = (2 * mu0 * mu1 + c1) * (2 * sigma01 + c2)
    denom = (mu0**2 + mu1**2 + c1) * (sigma00 + sigma11 + c2)
    return np.mean(numer / denom)


def main():
    path, height, width, pairs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    images = np.fromfile(path, dtype=np.float32).astype(np.float64)
    images = images.reshape(pairs, 2, height, width, 3)
    for a, b in images:
        print("%.17g" % ssim(a, b))


if __name__ == "__main__":
    main()
