from . import lmdeploy as lmdeploy

__all__ = ["lmdeploy"]
