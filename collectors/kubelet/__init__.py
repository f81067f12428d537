"""The kubelet's pod-resources API: which pod, namespace and container holds each GPU.

``api.proto`` is vendored from Kubernetes; ``api_pb2*`` are generated from it (see its header).
"""
