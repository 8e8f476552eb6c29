// Launchers of kernels/feature_maps.cu: the data movement around the GPU ResUNet's layers
// (cuda_feature_net.h) that the CPU network does in feature_net.cpp's helpers. Kept private to
// the CUDA backend: only the GPU feature network calls them, on device pointers, asynchronously
// on `stream`. Every one moves or adds floats without reordering a sum, so each matches its CPU
// counterpart bit for bit.
#pragma once

#include <cstddef>

#include "mvibr/nn/conv_layers.h"  // MapBatch
#include "mvibr/nn/cuda_layers.h"  // StreamHandle

namespace mvibr::nn::cuda {

// in: [maps.batch, plane, count] channels last → channels [first, first + count) of the NCHW
// maps (overwritten; the other channels are left alone). The images in, the output gradients back.
void channels_last_to_planar(const float* in, int first, int count, const MapBatch& maps,
                             StreamHandle stream);
// Channels [first, first + count) of the NCHW maps → out: [maps.batch, plane, count].
void planar_to_channels_last(const MapBatch& maps, int first, int count, float* out,
                             StreamHandle stream);

// IBRNet's skipconnect: out = cat([decoder, encoder zero-padded to the decoder's size]) along
// channels, the encoder placed at ((Hd - He) / 2, (Wd - We) / 2). out: [batch, Cd + Ce, Hd, Wd].
// Throws InvalidArgument when the encoder's maps are larger than the decoder's.
void skip_concat_forward(const MapBatch& decoder, const MapBatch& encoder, float* out,
                         StreamHandle stream);
// Its gradient split back: grad_decoder and grad_encoder (the encoder's window, cropped) are
// overwritten.
void skip_concat_backward(const float* grad_out, const MapBatch& decoder, const MapBatch& encoder,
                          float* grad_decoder, float* grad_encoder, StreamHandle stream);

}  // namespace mvibr::nn::cuda
