"""Private protobuf descriptor pool for Ferry's generated protocol modules.

Ferry's ``.proto`` files deliberately reuse Triton's file names
(``grpc_service.proto``, ``model_config.proto``), package (``inference``) and
message names, so that the wire format is identical.  tritonclient registers
its copies of those files in protobuf's process-wide default pool; if Ferry's
modules registered there too, importing both packages in one process would
fail with a "duplicate symbol" error.

``protos/generate.py`` therefore rewrites the generated ``*_pb2.py`` modules
to add their files to :data:`POOL` instead.  Keep this module free of other
imports from the package: the generated modules import it while they are
themselves being imported.
"""

from google.protobuf import descriptor_pool

#: The pool holding ``model_config.proto`` and ``grpc_service.proto``.  Use it
#: (rather than ``descriptor_pool.Default()``) to look up Ferry's descriptors
#: by name, e.g. ``POOL.FindMessageTypeByName("inference.ModelConfig")``.
POOL: descriptor_pool.DescriptorPool = descriptor_pool.DescriptorPool()

__all__ = ["POOL"]
