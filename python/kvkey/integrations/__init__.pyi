from . import lmdeploy as lmdeploy
from . import vllm as vllm

__all__ = ["lmdeploy", "vllm"]
