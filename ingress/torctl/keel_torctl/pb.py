"""The generated protobuf modules under short names (run `make build` to generate them)."""

from .gen.keel.v1 import control_pb2, control_pb2_grpc, torctl_pb2, torctl_pb2_grpc

__all__ = ["control_pb2", "control_pb2_grpc", "torctl_pb2", "torctl_pb2_grpc"]
