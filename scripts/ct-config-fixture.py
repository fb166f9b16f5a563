#!/usr/bin/env python3
"""Writes the quantization_config that compressed-tensors (the library
llm-compressor saves its checkpoints with) gives an int8 w8a8 model: a
small Linear model with lm_head, the "W8A8" preset (per-channel int8
weights, dynamic per-token int8 activations), compressed in the
"int-quantized" format, as llm-compressor's save_pretrained does.

    python3 scripts/ct-config-fixture.py tests/data/ct-quantization-config.json

Needs torch and compressed-tensors (pip install compressed-tensors). The test
suite compares the key set of the config `scaledmm quantize` writes with
this file's (tests/check_checkpoint.c) and, where compressed-tensors is
installed, with a live one (tests/python/test_checkpoint_interop.py).
"""
import json
import os
import sys
import tempfile

import torch
import compressed_tensors
from compressed_tensors.compressors import ModelCompressor
from compressed_tensors.quantization import (QuantizationConfig, apply_quantization_config,
                                             preset_name_to_scheme)


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = torch.nn.Linear(8, 4)
        self.lm_head = torch.nn.Linear(4, 2)


def quantization_config():
    """The quantization_config dict compressed-tensors writes."""
    torch.manual_seed(0)
    model = Tiny()
    config = QuantizationConfig(config_groups={"group_0": preset_name_to_scheme("W8A8", ["Linear"])},
                                ignore=["lm_head"])
    apply_quantization_config(model, config)
    # the observer's result, as llm-compressor's calibration leaves it
    with torch.no_grad():
        w = model.dense.weight
        model.dense.weight_scale.copy_(w.abs().amax(dim=1, keepdim=True) / 127.5)
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format="int-quantized")
    compressor.compress_model(model)
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump({}, f)
        compressor.update_config(d)
        with open(os.path.join(d, "config.json")) as f:
            return json.load(f)["quantization_config"]


if __name__ == "__main__":
    qc = quantization_config()
    text = json.dumps({"compressed_tensors_version": compressed_tensors.__version__,
                       "quantization_config": qc}, indent=2, sort_keys=True) + "\n"
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
