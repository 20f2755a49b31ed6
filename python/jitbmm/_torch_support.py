"""What jitbmm.torch's products and chains share: the library's name of each torch dtype, the current stream as the
library takes it, the lock of the tables of plans, those tables' bound, and the tensor types the eager paths take."""

import threading

import torch

_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # an int, without building a Stream object

# The torch dtypes jitbmm computes in, by their names in the library's table (jitbmm.DTYPES).
DTYPE_NAMES = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16"}
lock = threading.Lock()
TABLE_ENTRIES = 4096  # then a table of plans starts again (shapes that vary without end, e.g. every sequence length)
PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)  # subclasses go through the registered operators


def stream(device_index):
    return _raw_stream(device_index) if _raw_stream else torch.cuda.current_stream(device_index).cuda_stream


def address(t):
    """A tensor's device address for the library, or None for no tensor."""
    return t.data_ptr() if t is not None else None
