"""The generated protobuf modules under short names (run `make build` to generate them), and
the control-plane token's helpers copied beside them (proto/keel/v1/controltoken.py)."""

from .gen.keel.v1 import control_pb2, control_pb2_grpc, controltoken, torctl_pb2, torctl_pb2_grpc

__all__ = ["control_pb2", "control_pb2_grpc", "controltoken", "torctl_pb2", "torctl_pb2_grpc"]
