from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DataType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TYPE_INVALID: _ClassVar[DataType]
    TYPE_BOOL: _ClassVar[DataType]
    TYPE_UINT8: _ClassVar[DataType]
    TYPE_UINT16: _ClassVar[DataType]
    TYPE_UINT32: _ClassVar[DataType]
    TYPE_UINT64: _ClassVar[DataType]
    TYPE_INT8: _ClassVar[DataType]
    TYPE_INT16: _ClassVar[DataType]
    TYPE_INT32: _ClassVar[DataType]
    TYPE_INT64: _ClassVar[DataType]
    TYPE_FP16: _ClassVar[DataType]
    TYPE_FP32: _ClassVar[DataType]
    TYPE_FP64: _ClassVar[DataType]
    TYPE_STRING: _ClassVar[DataType]
    TYPE_BF16: _ClassVar[DataType]
TYPE_INVALID: DataType
TYPE_BOOL: DataType
TYPE_UINT8: DataType
TYPE_UINT16: DataType
TYPE_UINT32: DataType
TYPE_UINT64: DataType
TYPE_INT8: DataType
TYPE_INT16: DataType
TYPE_INT32: DataType
TYPE_INT64: DataType
TYPE_FP16: DataType
TYPE_FP32: DataType
TYPE_FP64: DataType
TYPE_STRING: DataType
TYPE_BF16: DataType

class ModelRateLimiter(_message.Message):
    __slots__ = ("resources", "priority")
    class Resource(_message.Message):
        __slots__ = ("name", "count")
        NAME_FIELD_NUMBER: _ClassVar[int]
        GLOBAL_FIELD_NUMBER: _ClassVar[int]
        COUNT_FIELD_NUMBER: _ClassVar[int]
        name: str
        count: int
        def __init__(self, name: _Optional[str] = ..., count: _Optional[int] = ..., **kwargs) -> None: ...
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    resources: _containers.RepeatedCompositeFieldContainer[ModelRateLimiter.Resource]
    priority: int
    def __init__(self, resources: _Optional[_Iterable[_Union[ModelRateLimiter.Resource, _Mapping]]] = ..., priority: _Optional[int] = ...) -> None: ...

class ModelInstanceGroup(_message.Message):
    __slots__ = ("name", "kind", "count", "rate_limiter", "gpus", "secondary_devices", "profile", "passive", "host_policy")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_AUTO: _ClassVar[ModelInstanceGroup.Kind]
        KIND_GPU: _ClassVar[ModelInstanceGroup.Kind]
        KIND_CPU: _ClassVar[ModelInstanceGroup.Kind]
        KIND_MODEL: _ClassVar[ModelInstanceGroup.Kind]
    KIND_AUTO: ModelInstanceGroup.Kind
    KIND_GPU: ModelInstanceGroup.Kind
    KIND_CPU: ModelInstanceGroup.Kind
    KIND_MODEL: ModelInstanceGroup.Kind
    class SecondaryDevice(_message.Message):
        __slots__ = ("kind", "device_id")
        class SecondaryDeviceKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
            __slots__ = ()
            KIND_NVDLA: _ClassVar[ModelInstanceGroup.SecondaryDevice.SecondaryDeviceKind]
        KIND_NVDLA: ModelInstanceGroup.SecondaryDevice.SecondaryDeviceKind
        KIND_FIELD_NUMBER: _ClassVar[int]
        DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
        kind: ModelInstanceGroup.SecondaryDevice.SecondaryDeviceKind
        device_id: int
        def __init__(self, kind: _Optional[_Union[ModelInstanceGroup.SecondaryDevice.SecondaryDeviceKind, str]] = ..., device_id: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMITER_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    SECONDARY_DEVICES_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    PASSIVE_FIELD_NUMBER: _ClassVar[int]
    HOST_POLICY_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: ModelInstanceGroup.Kind
    count: int
    rate_limiter: ModelRateLimiter
    gpus: _containers.RepeatedScalarFieldContainer[int]
    secondary_devices: _containers.RepeatedCompositeFieldContainer[ModelInstanceGroup.SecondaryDevice]
    profile: _containers.RepeatedScalarFieldContainer[str]
    passive: bool
    host_policy: str
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[_Union[ModelInstanceGroup.Kind, str]] = ..., count: _Optional[int] = ..., rate_limiter: _Optional[_Union[ModelRateLimiter, _Mapping]] = ..., gpus: _Optional[_Iterable[int]] = ..., secondary_devices: _Optional[_Iterable[_Union[ModelInstanceGroup.SecondaryDevice, _Mapping]]] = ..., profile: _Optional[_Iterable[str]] = ..., passive: bool = ..., host_policy: _Optional[str] = ...) -> None: ...

class ModelTensorReshape(_message.Message):
    __slots__ = ("shape",)
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    shape: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, shape: _Optional[_Iterable[int]] = ...) -> None: ...

class ModelInput(_message.Message):
    __slots__ = ("name", "data_type", "format", "dims", "reshape", "is_shape_tensor", "allow_ragged_batch", "optional", "is_non_linear_format_io")
    class Format(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        FORMAT_NONE: _ClassVar[ModelInput.Format]
        FORMAT_NHWC: _ClassVar[ModelInput.Format]
        FORMAT_NCHW: _ClassVar[ModelInput.Format]
    FORMAT_NONE: ModelInput.Format
    FORMAT_NHWC: ModelInput.Format
    FORMAT_NCHW: ModelInput.Format
    NAME_FIELD_NUMBER: _ClassVar[int]
    DATA_TYPE_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    DIMS_FIELD_NUMBER: _ClassVar[int]
    RESHAPE_FIELD_NUMBER: _ClassVar[int]
    IS_SHAPE_TENSOR_FIELD_NUMBER: _ClassVar[int]
    ALLOW_RAGGED_BATCH_FIELD_NUMBER: _ClassVar[int]
    OPTIONAL_FIELD_NUMBER: _ClassVar[int]
    IS_NON_LINEAR_FORMAT_IO_FIELD_NUMBER: _ClassVar[int]
    name: str
    data_type: DataType
    format: ModelInput.Format
    dims: _containers.RepeatedScalarFieldContainer[int]
    reshape: ModelTensorReshape
    is_shape_tensor: bool
    allow_ragged_batch: bool
    optional: bool
    is_non_linear_format_io: bool
    def __init__(self, name: _Optional[str] = ..., data_type: _Optional[_Union[DataType, str]] = ..., format: _Optional[_Union[ModelInput.Format, str]] = ..., dims: _Optional[_Iterable[int]] = ..., reshape: _Optional[_Union[ModelTensorReshape, _Mapping]] = ..., is_shape_tensor: bool = ..., allow_ragged_batch: bool = ..., optional: bool = ..., is_non_linear_format_io: bool = ...) -> None: ...

class ModelOutput(_message.Message):
    __slots__ = ("name", "data_type", "dims", "reshape", "label_filename", "is_shape_tensor", "is_non_linear_format_io")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DATA_TYPE_FIELD_NUMBER: _ClassVar[int]
    DIMS_FIELD_NUMBER: _ClassVar[int]
    RESHAPE_FIELD_NUMBER: _ClassVar[int]
    LABEL_FILENAME_FIELD_NUMBER: _ClassVar[int]
    IS_SHAPE_TENSOR_FIELD_NUMBER: _ClassVar[int]
    IS_NON_LINEAR_FORMAT_IO_FIELD_NUMBER: _ClassVar[int]
    name: str
    data_type: DataType
    dims: _containers.RepeatedScalarFieldContainer[int]
    reshape: ModelTensorReshape
    label_filename: str
    is_shape_tensor: bool
    is_non_linear_format_io: bool
    def __init__(self, name: _Optional[str] = ..., data_type: _Optional[_Union[DataType, str]] = ..., dims: _Optional[_Iterable[int]] = ..., reshape: _Optional[_Union[ModelTensorReshape, _Mapping]] = ..., label_filename: _Optional[str] = ..., is_shape_tensor: bool = ..., is_non_linear_format_io: bool = ...) -> None: ...

class BatchInput(_message.Message):
    __slots__ = ("kind", "target_name", "data_type", "source_input")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        BATCH_ELEMENT_COUNT: _ClassVar[BatchInput.Kind]
        BATCH_ACCUMULATED_ELEMENT_COUNT: _ClassVar[BatchInput.Kind]
        BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO: _ClassVar[BatchInput.Kind]
        BATCH_MAX_ELEMENT_COUNT_AS_SHAPE: _ClassVar[BatchInput.Kind]
        BATCH_ITEM_SHAPE: _ClassVar[BatchInput.Kind]
        BATCH_ITEM_SHAPE_FLATTEN: _ClassVar[BatchInput.Kind]
    BATCH_ELEMENT_COUNT: BatchInput.Kind
    BATCH_ACCUMULATED_ELEMENT_COUNT: BatchInput.Kind
    BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO: BatchInput.Kind
    BATCH_MAX_ELEMENT_COUNT_AS_SHAPE: BatchInput.Kind
    BATCH_ITEM_SHAPE: BatchInput.Kind
    BATCH_ITEM_SHAPE_FLATTEN: BatchInput.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    TARGET_NAME_FIELD_NUMBER: _ClassVar[int]
    DATA_TYPE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_INPUT_FIELD_NUMBER: _ClassVar[int]
    kind: BatchInput.Kind
    target_name: _containers.RepeatedScalarFieldContainer[str]
    data_type: DataType
    source_input: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, kind: _Optional[_Union[BatchInput.Kind, str]] = ..., target_name: _Optional[_Iterable[str]] = ..., data_type: _Optional[_Union[DataType, str]] = ..., source_input: _Optional[_Iterable[str]] = ...) -> None: ...

class BatchOutput(_message.Message):
    __slots__ = ("target_name", "kind", "source_input")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        BATCH_SCATTER_WITH_INPUT_SHAPE: _ClassVar[BatchOutput.Kind]
    BATCH_SCATTER_WITH_INPUT_SHAPE: BatchOutput.Kind
    TARGET_NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SOURCE_INPUT_FIELD_NUMBER: _ClassVar[int]
    target_name: _containers.RepeatedScalarFieldContainer[str]
    kind: BatchOutput.Kind
    source_input: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, target_name: _Optional[_Iterable[str]] = ..., kind: _Optional[_Union[BatchOutput.Kind, str]] = ..., source_input: _Optional[_Iterable[str]] = ...) -> None: ...

class ModelVersionPolicy(_message.Message):
    __slots__ = ("latest", "all", "specific")
    class Latest(_message.Message):
        __slots__ = ("num_versions",)
        NUM_VERSIONS_FIELD_NUMBER: _ClassVar[int]
        num_versions: int
        def __init__(self, num_versions: _Optional[int] = ...) -> None: ...
    class All(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class Specific(_message.Message):
        __slots__ = ("versions",)
        VERSIONS_FIELD_NUMBER: _ClassVar[int]
        versions: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, versions: _Optional[_Iterable[int]] = ...) -> None: ...
    LATEST_FIELD_NUMBER: _ClassVar[int]
    ALL_FIELD_NUMBER: _ClassVar[int]
    SPECIFIC_FIELD_NUMBER: _ClassVar[int]
    latest: ModelVersionPolicy.Latest
    all: ModelVersionPolicy.All
    specific: ModelVersionPolicy.Specific
    def __init__(self, latest: _Optional[_Union[ModelVersionPolicy.Latest, _Mapping]] = ..., all: _Optional[_Union[ModelVersionPolicy.All, _Mapping]] = ..., specific: _Optional[_Union[ModelVersionPolicy.Specific, _Mapping]] = ...) -> None: ...

class ModelOptimizationPolicy(_message.Message):
    __slots__ = ("graph", "priority", "cuda", "execution_accelerators", "input_pinned_memory", "output_pinned_memory", "gather_kernel_buffer_threshold", "eager_batching")
    class ModelPriority(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        PRIORITY_DEFAULT: _ClassVar[ModelOptimizationPolicy.ModelPriority]
        PRIORITY_MAX: _ClassVar[ModelOptimizationPolicy.ModelPriority]
        PRIORITY_MIN: _ClassVar[ModelOptimizationPolicy.ModelPriority]
    PRIORITY_DEFAULT: ModelOptimizationPolicy.ModelPriority
    PRIORITY_MAX: ModelOptimizationPolicy.ModelPriority
    PRIORITY_MIN: ModelOptimizationPolicy.ModelPriority
    class Graph(_message.Message):
        __slots__ = ("level",)
        LEVEL_FIELD_NUMBER: _ClassVar[int]
        level: int
        def __init__(self, level: _Optional[int] = ...) -> None: ...
    class Cuda(_message.Message):
        __slots__ = ("graphs", "busy_wait_events", "graph_spec", "output_copy_stream")
        class GraphSpec(_message.Message):
            __slots__ = ("batch_size", "input", "graph_lower_bound")
            class Shape(_message.Message):
                __slots__ = ("dim",)
                DIM_FIELD_NUMBER: _ClassVar[int]
                dim: _containers.RepeatedScalarFieldContainer[int]
                def __init__(self, dim: _Optional[_Iterable[int]] = ...) -> None: ...
            class LowerBound(_message.Message):
                __slots__ = ("batch_size", "input")
                class InputEntry(_message.Message):
                    __slots__ = ("key", "value")
                    KEY_FIELD_NUMBER: _ClassVar[int]
                    VALUE_FIELD_NUMBER: _ClassVar[int]
                    key: str
                    value: ModelOptimizationPolicy.Cuda.GraphSpec.Shape
                    def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ModelOptimizationPolicy.Cuda.GraphSpec.Shape, _Mapping]] = ...) -> None: ...
                BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
                INPUT_FIELD_NUMBER: _ClassVar[int]
                batch_size: int
                input: _containers.MessageMap[str, ModelOptimizationPolicy.Cuda.GraphSpec.Shape]
                def __init__(self, batch_size: _Optional[int] = ..., input: _Optional[_Mapping[str, ModelOptimizationPolicy.Cuda.GraphSpec.Shape]] = ...) -> None: ...
            class InputEntry(_message.Message):
                __slots__ = ("key", "value")
                KEY_FIELD_NUMBER: _ClassVar[int]
                VALUE_FIELD_NUMBER: _ClassVar[int]
                key: str
                value: ModelOptimizationPolicy.Cuda.GraphSpec.Shape
                def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ModelOptimizationPolicy.Cuda.GraphSpec.Shape, _Mapping]] = ...) -> None: ...
            BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
            INPUT_FIELD_NUMBER: _ClassVar[int]
            GRAPH_LOWER_BOUND_FIELD_NUMBER: _ClassVar[int]
            batch_size: int
            input: _containers.MessageMap[str, ModelOptimizationPolicy.Cuda.GraphSpec.Shape]
            graph_lower_bound: ModelOptimizationPolicy.Cuda.GraphSpec.LowerBound
            def __init__(self, batch_size: _Optional[int] = ..., input: _Optional[_Mapping[str, ModelOptimizationPolicy.Cuda.GraphSpec.Shape]] = ..., graph_lower_bound: _Optional[_Union[ModelOptimizationPolicy.Cuda.GraphSpec.LowerBound, _Mapping]] = ...) -> None: ...
        GRAPHS_FIELD_NUMBER: _ClassVar[int]
        BUSY_WAIT_EVENTS_FIELD_NUMBER: _ClassVar[int]
        GRAPH_SPEC_FIELD_NUMBER: _ClassVar[int]
        OUTPUT_COPY_STREAM_FIELD_NUMBER: _ClassVar[int]
        graphs: bool
        busy_wait_events: bool
        graph_spec: _containers.RepeatedCompositeFieldContainer[ModelOptimizationPolicy.Cuda.GraphSpec]
        output_copy_stream: bool
        def __init__(self, graphs: bool = ..., busy_wait_events: bool = ..., graph_spec: _Optional[_Iterable[_Union[ModelOptimizationPolicy.Cuda.GraphSpec, _Mapping]]] = ..., output_copy_stream: bool = ...) -> None: ...
    class ExecutionAccelerators(_message.Message):
        __slots__ = ("gpu_execution_accelerator", "cpu_execution_accelerator")
        class Accelerator(_message.Message):
            __slots__ = ("name", "parameters")
            class ParametersEntry(_message.Message):
                __slots__ = ("key", "value")
                KEY_FIELD_NUMBER: _ClassVar[int]
                VALUE_FIELD_NUMBER: _ClassVar[int]
                key: str
                value: str
                def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
            NAME_FIELD_NUMBER: _ClassVar[int]
            PARAMETERS_FIELD_NUMBER: _ClassVar[int]
            name: str
            parameters: _containers.ScalarMap[str, str]
            def __init__(self, name: _Optional[str] = ..., parameters: _Optional[_Mapping[str, str]] = ...) -> None: ...
        GPU_EXECUTION_ACCELERATOR_FIELD_NUMBER: _ClassVar[int]
        CPU_EXECUTION_ACCELERATOR_FIELD_NUMBER: _ClassVar[int]
        gpu_execution_accelerator: _containers.RepeatedCompositeFieldContainer[ModelOptimizationPolicy.ExecutionAccelerators.Accelerator]
        cpu_execution_accelerator: _containers.RepeatedCompositeFieldContainer[ModelOptimizationPolicy.ExecutionAccelerators.Accelerator]
        def __init__(self, gpu_execution_accelerator: _Optional[_Iterable[_Union[ModelOptimizationPolicy.ExecutionAccelerators.Accelerator, _Mapping]]] = ..., cpu_execution_accelerator: _Optional[_Iterable[_Union[ModelOptimizationPolicy.ExecutionAccelerators.Accelerator, _Mapping]]] = ...) -> None: ...
    class PinnedMemoryBuffer(_message.Message):
        __slots__ = ("enable",)
        ENABLE_FIELD_NUMBER: _ClassVar[int]
        enable: bool
        def __init__(self, enable: bool = ...) -> None: ...
    GRAPH_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    CUDA_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ACCELERATORS_FIELD_NUMBER: _ClassVar[int]
    INPUT_PINNED_MEMORY_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_PINNED_MEMORY_FIELD_NUMBER: _ClassVar[int]
    GATHER_KERNEL_BUFFER_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    EAGER_BATCHING_FIELD_NUMBER: _ClassVar[int]
    graph: ModelOptimizationPolicy.Graph
    priority: ModelOptimizationPolicy.ModelPriority
    cuda: ModelOptimizationPolicy.Cuda
    execution_accelerators: ModelOptimizationPolicy.ExecutionAccelerators
    input_pinned_memory: ModelOptimizationPolicy.PinnedMemoryBuffer
    output_pinned_memory: ModelOptimizationPolicy.PinnedMemoryBuffer
    gather_kernel_buffer_threshold: int
    eager_batching: bool
    def __init__(self, graph: _Optional[_Union[ModelOptimizationPolicy.Graph, _Mapping]] = ..., priority: _Optional[_Union[ModelOptimizationPolicy.ModelPriority, str]] = ..., cuda: _Optional[_Union[ModelOptimizationPolicy.Cuda, _Mapping]] = ..., execution_accelerators: _Optional[_Union[ModelOptimizationPolicy.ExecutionAccelerators, _Mapping]] = ..., input_pinned_memory: _Optional[_Union[ModelOptimizationPolicy.PinnedMemoryBuffer, _Mapping]] = ..., output_pinned_memory: _Optional[_Union[ModelOptimizationPolicy.PinnedMemoryBuffer, _Mapping]] = ..., gather_kernel_buffer_threshold: _Optional[int] = ..., eager_batching: bool = ...) -> None: ...

class ModelQueuePolicy(_message.Message):
    __slots__ = ("timeout_action", "default_timeout_microseconds", "allow_timeout_override", "max_queue_size")
    class TimeoutAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        REJECT: _ClassVar[ModelQueuePolicy.TimeoutAction]
        DELAY: _ClassVar[ModelQueuePolicy.TimeoutAction]
    REJECT: ModelQueuePolicy.TimeoutAction
    DELAY: ModelQueuePolicy.TimeoutAction
    TIMEOUT_ACTION_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_TIMEOUT_MICROSECONDS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_TIMEOUT_OVERRIDE_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUE_SIZE_FIELD_NUMBER: _ClassVar[int]
    timeout_action: ModelQueuePolicy.TimeoutAction
    default_timeout_microseconds: int
    allow_timeout_override: bool
    max_queue_size: int
    def __init__(self, timeout_action: _Optional[_Union[ModelQueuePolicy.TimeoutAction, str]] = ..., default_timeout_microseconds: _Optional[int] = ..., allow_timeout_override: bool = ..., max_queue_size: _Optional[int] = ...) -> None: ...

class ModelDynamicBatching(_message.Message):
    __slots__ = ("preferred_batch_size", "max_queue_delay_microseconds", "preserve_ordering", "priority_levels", "default_priority_level", "default_queue_policy", "priority_queue_policy")
    class PriorityQueuePolicyEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: ModelQueuePolicy
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[ModelQueuePolicy, _Mapping]] = ...) -> None: ...
    PREFERRED_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUE_DELAY_MICROSECONDS_FIELD_NUMBER: _ClassVar[int]
    PRESERVE_ORDERING_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_LEVELS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_PRIORITY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_QUEUE_POLICY_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_QUEUE_POLICY_FIELD_NUMBER: _ClassVar[int]
    preferred_batch_size: _containers.RepeatedScalarFieldContainer[int]
    max_queue_delay_microseconds: int
    preserve_ordering: bool
    priority_levels: int
    default_priority_level: int
    default_queue_policy: ModelQueuePolicy
    priority_queue_policy: _containers.MessageMap[int, ModelQueuePolicy]
    def __init__(self, preferred_batch_size: _Optional[_Iterable[int]] = ..., max_queue_delay_microseconds: _Optional[int] = ..., preserve_ordering: bool = ..., priority_levels: _Optional[int] = ..., default_priority_level: _Optional[int] = ..., default_queue_policy: _Optional[_Union[ModelQueuePolicy, _Mapping]] = ..., priority_queue_policy: _Optional[_Mapping[int, ModelQueuePolicy]] = ...) -> None: ...

class ModelSequenceBatching(_message.Message):
    __slots__ = ("direct", "oldest", "max_sequence_idle_microseconds", "control_input", "state", "iterative_sequence")
    class Control(_message.Message):
        __slots__ = ("kind", "int32_false_true", "fp32_false_true", "bool_false_true", "data_type")
        class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
            __slots__ = ()
            CONTROL_SEQUENCE_START: _ClassVar[ModelSequenceBatching.Control.Kind]
            CONTROL_SEQUENCE_READY: _ClassVar[ModelSequenceBatching.Control.Kind]
            CONTROL_SEQUENCE_END: _ClassVar[ModelSequenceBatching.Control.Kind]
            CONTROL_SEQUENCE_CORRID: _ClassVar[ModelSequenceBatching.Control.Kind]
        CONTROL_SEQUENCE_START: ModelSequenceBatching.Control.Kind
        CONTROL_SEQUENCE_READY: ModelSequenceBatching.Control.Kind
        CONTROL_SEQUENCE_END: ModelSequenceBatching.Control.Kind
        CONTROL_SEQUENCE_CORRID: ModelSequenceBatching.Control.Kind
        KIND_FIELD_NUMBER: _ClassVar[int]
        INT32_FALSE_TRUE_FIELD_NUMBER: _ClassVar[int]
        FP32_FALSE_TRUE_FIELD_NUMBER: _ClassVar[int]
        BOOL_FALSE_TRUE_FIELD_NUMBER: _ClassVar[int]
        DATA_TYPE_FIELD_NUMBER: _ClassVar[int]
        kind: ModelSequenceBatching.Control.Kind
        int32_false_true: _containers.RepeatedScalarFieldContainer[int]
        fp32_false_true: _containers.RepeatedScalarFieldContainer[float]
        bool_false_true: _containers.RepeatedScalarFieldContainer[bool]
        data_type: DataType
        def __init__(self, kind: _Optional[_Union[ModelSequenceBatching.Control.Kind, str]] = ..., int32_false_true: _Optional[_Iterable[int]] = ..., fp32_false_true: _Optional[_Iterable[float]] = ..., bool_false_true: _Optional[_Iterable[bool]] = ..., data_type: _Optional[_Union[DataType, str]] = ...) -> None: ...
    class ControlInput(_message.Message):
        __slots__ = ("name", "control")
        NAME_FIELD_NUMBER: _ClassVar[int]
        CONTROL_FIELD_NUMBER: _ClassVar[int]
        name: str
        control: _containers.RepeatedCompositeFieldContainer[ModelSequenceBatching.Control]
        def __init__(self, name: _Optional[str] = ..., control: _Optional[_Iterable[_Union[ModelSequenceBatching.Control, _Mapping]]] = ...) -> None: ...
    class InitialState(_message.Message):
        __slots__ = ("data_type", "dims", "zero_data", "data_file", "name")
        DATA_TYPE_FIELD_NUMBER: _ClassVar[int]
        DIMS_FIELD_NUMBER: _ClassVar[int]
        ZERO_DATA_FIELD_NUMBER: _ClassVar[int]
        DATA_FILE_FIELD_NUMBER: _ClassVar[int]
        NAME_FIELD_NUMBER: _ClassVar[int]
        data_type: DataType
        dims: _containers.RepeatedScalarFieldContainer[int]
        zero_data: bool
        data_file: str
        name: str
        def __init__(self, data_type: _Optional[_Union[DataType, str]] = ..., dims: _Optional[_Iterable[int]] = ..., zero_data: bool = ..., data_file: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...
    class State(_message.Message):
        __slots__ = ("input_name", "output_name", "data_type", "dims", "initial_state", "use_same_buffer_for_input_output", "use_growable_memory")
        INPUT_NAME_FIELD_NUMBER: _ClassVar[int]
        OUTPUT_NAME_FIELD_NUMBER: _ClassVar[int]
        DATA_TYPE_FIELD_NUMBER: _ClassVar[int]
        DIMS_FIELD_NUMBER: _ClassVar[int]
        INITIAL_STATE_FIELD_NUMBER: _ClassVar[int]
        USE_SAME_BUFFER_FOR_INPUT_OUTPUT_FIELD_NUMBER: _ClassVar[int]
        USE_GROWABLE_MEMORY_FIELD_NUMBER: _ClassVar[int]
        input_name: str
        output_name: str
        data_type: DataType
        dims: _containers.RepeatedScalarFieldContainer[int]
        initial_state: _containers.RepeatedCompositeFieldContainer[ModelSequenceBatching.InitialState]
        use_same_buffer_for_input_output: bool
        use_growable_memory: bool
        def __init__(self, input_name: _Optional[str] = ..., output_name: _Optional[str] = ..., data_type: _Optional[_Union[DataType, str]] = ..., dims: _Optional[_Iterable[int]] = ..., initial_state: _Optional[_Iterable[_Union[ModelSequenceBatching.InitialState, _Mapping]]] = ..., use_same_buffer_for_input_output: bool = ..., use_growable_memory: bool = ...) -> None: ...
    class StrategyDirect(_message.Message):
        __slots__ = ("max_queue_delay_microseconds", "minimum_slot_utilization")
        MAX_QUEUE_DELAY_MICROSECONDS_FIELD_NUMBER: _ClassVar[int]
        MINIMUM_SLOT_UTILIZATION_FIELD_NUMBER: _ClassVar[int]
        max_queue_delay_microseconds: int
        minimum_slot_utilization: float
        def __init__(self, max_queue_delay_microseconds: _Optional[int] = ..., minimum_slot_utilization: _Optional[float] = ...) -> None: ...
    class StrategyOldest(_message.Message):
        __slots__ = ("max_candidate_sequences", "preferred_batch_size", "max_queue_delay_microseconds", "preserve_ordering")
        MAX_CANDIDATE_SEQUENCES_FIELD_NUMBER: _ClassVar[int]
        PREFERRED_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
        MAX_QUEUE_DELAY_MICROSECONDS_FIELD_NUMBER: _ClassVar[int]
        PRESERVE_ORDERING_FIELD_NUMBER: _ClassVar[int]
        max_candidate_sequences: int
        preferred_batch_size: _containers.RepeatedScalarFieldContainer[int]
        max_queue_delay_microseconds: int
        preserve_ordering: bool
        def __init__(self, max_candidate_sequences: _Optional[int] = ..., preferred_batch_size: _Optional[_Iterable[int]] = ..., max_queue_delay_microseconds: _Optional[int] = ..., preserve_ordering: bool = ...) -> None: ...
    DIRECT_FIELD_NUMBER: _ClassVar[int]
    OLDEST_FIELD_NUMBER: _ClassVar[int]
    MAX_SEQUENCE_IDLE_MICROSECONDS_FIELD_NUMBER: _ClassVar[int]
    CONTROL_INPUT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ITERATIVE_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    direct: ModelSequenceBatching.StrategyDirect
    oldest: ModelSequenceBatching.StrategyOldest
    max_sequence_idle_microseconds: int
    control_input: _containers.RepeatedCompositeFieldContainer[ModelSequenceBatching.ControlInput]
    state: _containers.RepeatedCompositeFieldContainer[ModelSequenceBatching.State]
    iterative_sequence: bool
    def __init__(self, direct: _Optional[_Union[ModelSequenceBatching.StrategyDirect, _Mapping]] = ..., oldest: _Optional[_Union[ModelSequenceBatching.StrategyOldest, _Mapping]] = ..., max_sequence_idle_microseconds: _Optional[int] = ..., control_input: _Optional[_Iterable[_Union[ModelSequenceBatching.ControlInput, _Mapping]]] = ..., state: _Optional[_Iterable[_Union[ModelSequenceBatching.State, _Mapping]]] = ..., iterative_sequence: bool = ...) -> None: ...

class ModelEnsembling(_message.Message):
    __slots__ = ("step", "max_inflight_requests")
    class Step(_message.Message):
        __slots__ = ("model_name", "model_version", "input_map", "output_map", "model_namespace")
        class InputMapEntry(_message.Message):
            __slots__ = ("key", "value")
            KEY_FIELD_NUMBER: _ClassVar[int]
            VALUE_FIELD_NUMBER: _ClassVar[int]
            key: str
            value: str
            def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
        class OutputMapEntry(_message.Message):
            __slots__ = ("key", "value")
            KEY_FIELD_NUMBER: _ClassVar[int]
            VALUE_FIELD_NUMBER: _ClassVar[int]
            key: str
            value: str
            def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
        MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
        MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
        INPUT_MAP_FIELD_NUMBER: _ClassVar[int]
        OUTPUT_MAP_FIELD_NUMBER: _ClassVar[int]
        MODEL_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
        model_name: str
        model_version: int
        input_map: _containers.ScalarMap[str, str]
        output_map: _containers.ScalarMap[str, str]
        model_namespace: str
        def __init__(self, model_name: _Optional[str] = ..., model_version: _Optional[int] = ..., input_map: _Optional[_Mapping[str, str]] = ..., output_map: _Optional[_Mapping[str, str]] = ..., model_namespace: _Optional[str] = ...) -> None: ...
    STEP_FIELD_NUMBER: _ClassVar[int]
    MAX_INFLIGHT_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    step: _containers.RepeatedCompositeFieldContainer[ModelEnsembling.Step]
    max_inflight_requests: int
    def __init__(self, step: _Optional[_Iterable[_Union[ModelEnsembling.Step, _Mapping]]] = ..., max_inflight_requests: _Optional[int] = ...) -> None: ...

class ModelParameter(_message.Message):
    __slots__ = ("string_value",)
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    string_value: str
    def __init__(self, string_value: _Optional[str] = ...) -> None: ...

class ModelWarmup(_message.Message):
    __slots__ = ("name", "batch_size", "inputs", "count")
    class Input(_message.Message):
        __slots__ = ("data_type", "dims", "zero_data", "random_data", "input_data_file")
        DATA_TYPE_FIELD_NUMBER: _ClassVar[int]
        DIMS_FIELD_NUMBER: _ClassVar[int]
        ZERO_DATA_FIELD_NUMBER: _ClassVar[int]
        RANDOM_DATA_FIELD_NUMBER: _ClassVar[int]
        INPUT_DATA_FILE_FIELD_NUMBER: _ClassVar[int]
        data_type: DataType
        dims: _containers.RepeatedScalarFieldContainer[int]
        zero_data: bool
        random_data: bool
        input_data_file: str
        def __init__(self, data_type: _Optional[_Union[DataType, str]] = ..., dims: _Optional[_Iterable[int]] = ..., zero_data: bool = ..., random_data: bool = ..., input_data_file: _Optional[str] = ...) -> None: ...
    class InputsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ModelWarmup.Input
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ModelWarmup.Input, _Mapping]] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    name: str
    batch_size: int
    inputs: _containers.MessageMap[str, ModelWarmup.Input]
    count: int
    def __init__(self, name: _Optional[str] = ..., batch_size: _Optional[int] = ..., inputs: _Optional[_Mapping[str, ModelWarmup.Input]] = ..., count: _Optional[int] = ...) -> None: ...

class ModelOperations(_message.Message):
    __slots__ = ("op_library_filename",)
    OP_LIBRARY_FILENAME_FIELD_NUMBER: _ClassVar[int]
    op_library_filename: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, op_library_filename: _Optional[_Iterable[str]] = ...) -> None: ...

class ModelTransactionPolicy(_message.Message):
    __slots__ = ("decoupled",)
    DECOUPLED_FIELD_NUMBER: _ClassVar[int]
    decoupled: bool
    def __init__(self, decoupled: bool = ...) -> None: ...

class ModelRepositoryAgents(_message.Message):
    __slots__ = ("agents",)
    class Agent(_message.Message):
        __slots__ = ("name", "parameters")
        class ParametersEntry(_message.Message):
            __slots__ = ("key", "value")
            KEY_FIELD_NUMBER: _ClassVar[int]
            VALUE_FIELD_NUMBER: _ClassVar[int]
            key: str
            value: str
            def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
        NAME_FIELD_NUMBER: _ClassVar[int]
        PARAMETERS_FIELD_NUMBER: _ClassVar[int]
        name: str
        parameters: _containers.ScalarMap[str, str]
        def __init__(self, name: _Optional[str] = ..., parameters: _Optional[_Mapping[str, str]] = ...) -> None: ...
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[ModelRepositoryAgents.Agent]
    def __init__(self, agents: _Optional[_Iterable[_Union[ModelRepositoryAgents.Agent, _Mapping]]] = ...) -> None: ...

class ModelResponseCache(_message.Message):
    __slots__ = ("enable",)
    ENABLE_FIELD_NUMBER: _ClassVar[int]
    enable: bool
    def __init__(self, enable: bool = ...) -> None: ...

class ModelMetrics(_message.Message):
    __slots__ = ("metric_control",)
    class MetricControl(_message.Message):
        __slots__ = ("metric_identifier", "histogram_options")
        class MetricIdentifier(_message.Message):
            __slots__ = ("family",)
            FAMILY_FIELD_NUMBER: _ClassVar[int]
            family: str
            def __init__(self, family: _Optional[str] = ...) -> None: ...
        class HistogramOptions(_message.Message):
            __slots__ = ("buckets",)
            BUCKETS_FIELD_NUMBER: _ClassVar[int]
            buckets: _containers.RepeatedScalarFieldContainer[float]
            def __init__(self, buckets: _Optional[_Iterable[float]] = ...) -> None: ...
        METRIC_IDENTIFIER_FIELD_NUMBER: _ClassVar[int]
        HISTOGRAM_OPTIONS_FIELD_NUMBER: _ClassVar[int]
        metric_identifier: ModelMetrics.MetricControl.MetricIdentifier
        histogram_options: ModelMetrics.MetricControl.HistogramOptions
        def __init__(self, metric_identifier: _Optional[_Union[ModelMetrics.MetricControl.MetricIdentifier, _Mapping]] = ..., histogram_options: _Optional[_Union[ModelMetrics.MetricControl.HistogramOptions, _Mapping]] = ...) -> None: ...
    METRIC_CONTROL_FIELD_NUMBER: _ClassVar[int]
    metric_control: _containers.RepeatedCompositeFieldContainer[ModelMetrics.MetricControl]
    def __init__(self, metric_control: _Optional[_Iterable[_Union[ModelMetrics.MetricControl, _Mapping]]] = ...) -> None: ...

class ModelConfig(_message.Message):
    __slots__ = ("name", "platform", "backend", "runtime", "version_policy", "max_batch_size", "input", "output", "batch_input", "batch_output", "optimization", "dynamic_batching", "sequence_batching", "ensemble_scheduling", "instance_group", "default_model_filename", "cc_model_filenames", "metric_tags", "parameters", "model_warmup", "model_operations", "model_transaction_policy", "model_repository_agents", "response_cache", "model_metrics", "ferry_image")
    class CcModelFilenamesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class MetricTagsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class ParametersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ModelParameter
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ModelParameter, _Mapping]] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    VERSION_POLICY_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    BATCH_INPUT_FIELD_NUMBER: _ClassVar[int]
    BATCH_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZATION_FIELD_NUMBER: _ClassVar[int]
    DYNAMIC_BATCHING_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_BATCHING_FIELD_NUMBER: _ClassVar[int]
    ENSEMBLE_SCHEDULING_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_GROUP_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_MODEL_FILENAME_FIELD_NUMBER: _ClassVar[int]
    CC_MODEL_FILENAMES_FIELD_NUMBER: _ClassVar[int]
    METRIC_TAGS_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    MODEL_WARMUP_FIELD_NUMBER: _ClassVar[int]
    MODEL_OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    MODEL_TRANSACTION_POLICY_FIELD_NUMBER: _ClassVar[int]
    MODEL_REPOSITORY_AGENTS_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_CACHE_FIELD_NUMBER: _ClassVar[int]
    MODEL_METRICS_FIELD_NUMBER: _ClassVar[int]
    FERRY_IMAGE_FIELD_NUMBER: _ClassVar[int]
    name: str
    platform: str
    backend: str
    runtime: str
    version_policy: ModelVersionPolicy
    max_batch_size: int
    input: _containers.RepeatedCompositeFieldContainer[ModelInput]
    output: _containers.RepeatedCompositeFieldContainer[ModelOutput]
    batch_input: _containers.RepeatedCompositeFieldContainer[BatchInput]
    batch_output: _containers.RepeatedCompositeFieldContainer[BatchOutput]
    optimization: ModelOptimizationPolicy
    dynamic_batching: ModelDynamicBatching
    sequence_batching: ModelSequenceBatching
    ensemble_scheduling: ModelEnsembling
    instance_group: _containers.RepeatedCompositeFieldContainer[ModelInstanceGroup]
    default_model_filename: str
    cc_model_filenames: _containers.ScalarMap[str, str]
    metric_tags: _containers.ScalarMap[str, str]
    parameters: _containers.MessageMap[str, ModelParameter]
    model_warmup: _containers.RepeatedCompositeFieldContainer[ModelWarmup]
    model_operations: ModelOperations
    model_transaction_policy: ModelTransactionPolicy
    model_repository_agents: ModelRepositoryAgents
    response_cache: ModelResponseCache
    model_metrics: ModelMetrics
    ferry_image: FerryImagePipeline
    def __init__(self, name: _Optional[str] = ..., platform: _Optional[str] = ..., backend: _Optional[str] = ..., runtime: _Optional[str] = ..., version_policy: _Optional[_Union[ModelVersionPolicy, _Mapping]] = ..., max_batch_size: _Optional[int] = ..., input: _Optional[_Iterable[_Union[ModelInput, _Mapping]]] = ..., output: _Optional[_Iterable[_Union[ModelOutput, _Mapping]]] = ..., batch_input: _Optional[_Iterable[_Union[BatchInput, _Mapping]]] = ..., batch_output: _Optional[_Iterable[_Union[BatchOutput, _Mapping]]] = ..., optimization: _Optional[_Union[ModelOptimizationPolicy, _Mapping]] = ..., dynamic_batching: _Optional[_Union[ModelDynamicBatching, _Mapping]] = ..., sequence_batching: _Optional[_Union[ModelSequenceBatching, _Mapping]] = ..., ensemble_scheduling: _Optional[_Union[ModelEnsembling, _Mapping]] = ..., instance_group: _Optional[_Iterable[_Union[ModelInstanceGroup, _Mapping]]] = ..., default_model_filename: _Optional[str] = ..., cc_model_filenames: _Optional[_Mapping[str, str]] = ..., metric_tags: _Optional[_Mapping[str, str]] = ..., parameters: _Optional[_Mapping[str, ModelParameter]] = ..., model_warmup: _Optional[_Iterable[_Union[ModelWarmup, _Mapping]]] = ..., model_operations: _Optional[_Union[ModelOperations, _Mapping]] = ..., model_transaction_policy: _Optional[_Union[ModelTransactionPolicy, _Mapping]] = ..., model_repository_agents: _Optional[_Union[ModelRepositoryAgents, _Mapping]] = ..., response_cache: _Optional[_Union[ModelResponseCache, _Mapping]] = ..., model_metrics: _Optional[_Union[ModelMetrics, _Mapping]] = ..., ferry_image: _Optional[_Union[FerryImagePipeline, _Mapping]] = ...) -> None: ...

class FerryImagePipeline(_message.Message):
    __slots__ = ("preprocess", "classification", "detection", "input", "embedding", "text_recognition")
    PREPROCESS_FIELD_NUMBER: _ClassVar[int]
    CLASSIFICATION_FIELD_NUMBER: _ClassVar[int]
    DETECTION_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    TEXT_RECOGNITION_FIELD_NUMBER: _ClassVar[int]
    preprocess: FerryPreprocess
    classification: FerryClassification
    detection: FerryDetection
    input: str
    embedding: FerryEmbedding
    text_recognition: FerryTextRecognition
    def __init__(self, preprocess: _Optional[_Union[FerryPreprocess, _Mapping]] = ..., classification: _Optional[_Union[FerryClassification, _Mapping]] = ..., detection: _Optional[_Union[FerryDetection, _Mapping]] = ..., input: _Optional[str] = ..., embedding: _Optional[_Union[FerryEmbedding, _Mapping]] = ..., text_recognition: _Optional[_Union[FerryTextRecognition, _Mapping]] = ...) -> None: ...

class FerryTextRecognition(_message.Message):
    __slots__ = ("output",)
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    output: str
    def __init__(self, output: _Optional[str] = ...) -> None: ...

class FerryPreprocess(_message.Message):
    __slots__ = ("color_order", "layout", "data_type", "resize", "interpolation", "scale", "mean", "std", "pad_value", "letterbox_corner", "resize_shorter", "max_pixels", "device", "decode", "resize_engine", "crop_rounding", "resize_shorter_rounding", "pad_then_resize", "draft_decode", "resize_alignment", "letterbox_rounding", "letterbox_mapping", "limit_side_len", "limit_type", "size_multiple", "text_line_min_width", "text_line_max_width", "pad_to_batch")
    class ColorOrder(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        RGB: _ClassVar[FerryPreprocess.ColorOrder]
        BGR: _ClassVar[FerryPreprocess.ColorOrder]
        GRAY: _ClassVar[FerryPreprocess.ColorOrder]
    RGB: FerryPreprocess.ColorOrder
    BGR: FerryPreprocess.ColorOrder
    GRAY: FerryPreprocess.ColorOrder
    class Layout(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        NCHW: _ClassVar[FerryPreprocess.Layout]
        NHWC: _ClassVar[FerryPreprocess.Layout]
    NCHW: FerryPreprocess.Layout
    NHWC: FerryPreprocess.Layout
    class ResizeMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        EXACT: _ClassVar[FerryPreprocess.ResizeMode]
        SHORTER_SIDE_CENTER_CROP: _ClassVar[FerryPreprocess.ResizeMode]
        LETTERBOX: _ClassVar[FerryPreprocess.ResizeMode]
        LIMIT_SIDE: _ClassVar[FerryPreprocess.ResizeMode]
        TEXT_LINE: _ClassVar[FerryPreprocess.ResizeMode]
    EXACT: FerryPreprocess.ResizeMode
    SHORTER_SIDE_CENTER_CROP: FerryPreprocess.ResizeMode
    LETTERBOX: FerryPreprocess.ResizeMode
    LIMIT_SIDE: FerryPreprocess.ResizeMode
    TEXT_LINE: FerryPreprocess.ResizeMode
    class LimitType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        LIMIT_MIN: _ClassVar[FerryPreprocess.LimitType]
        LIMIT_MAX: _ClassVar[FerryPreprocess.LimitType]
    LIMIT_MIN: FerryPreprocess.LimitType
    LIMIT_MAX: FerryPreprocess.LimitType
    class Interpolation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        BILINEAR: _ClassVar[FerryPreprocess.Interpolation]
        NEAREST: _ClassVar[FerryPreprocess.Interpolation]
        BICUBIC: _ClassVar[FerryPreprocess.Interpolation]
        LANCZOS: _ClassVar[FerryPreprocess.Interpolation]
        AREA: _ClassVar[FerryPreprocess.Interpolation]
    BILINEAR: FerryPreprocess.Interpolation
    NEAREST: FerryPreprocess.Interpolation
    BICUBIC: FerryPreprocess.Interpolation
    LANCZOS: FerryPreprocess.Interpolation
    AREA: FerryPreprocess.Interpolation
    class ResizeEngine(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ENGINE_DEFAULT: _ClassVar[FerryPreprocess.ResizeEngine]
        OPENCV: _ClassVar[FerryPreprocess.ResizeEngine]
        PILLOW: _ClassVar[FerryPreprocess.ResizeEngine]
    ENGINE_DEFAULT: FerryPreprocess.ResizeEngine
    OPENCV: FerryPreprocess.ResizeEngine
    PILLOW: FerryPreprocess.ResizeEngine
    class CropRounding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        CROP_ROUND: _ClassVar[FerryPreprocess.CropRounding]
        CROP_FLOOR: _ClassVar[FerryPreprocess.CropRounding]
    CROP_ROUND: FerryPreprocess.CropRounding
    CROP_FLOOR: FerryPreprocess.CropRounding
    class SideRounding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SIDE_INT: _ClassVar[FerryPreprocess.SideRounding]
        SIDE_ROUND: _ClassVar[FerryPreprocess.SideRounding]
    SIDE_INT: FerryPreprocess.SideRounding
    SIDE_ROUND: FerryPreprocess.SideRounding
    class ResizeAlignment(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        PIXEL_CENTERS: _ClassVar[FerryPreprocess.ResizeAlignment]
        CORNERS: _ClassVar[FerryPreprocess.ResizeAlignment]
    PIXEL_CENTERS: FerryPreprocess.ResizeAlignment
    CORNERS: FerryPreprocess.ResizeAlignment
    class Device(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        CPU: _ClassVar[FerryPreprocess.Device]
        GPU: _ClassVar[FerryPreprocess.Device]
    CPU: FerryPreprocess.Device
    GPU: FerryPreprocess.Device
    class LetterboxRounding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        LETTERBOX_ROUNDING_DEFAULT: _ClassVar[FerryPreprocess.LetterboxRounding]
        LETTERBOX_ROUND: _ClassVar[FerryPreprocess.LetterboxRounding]
        LETTERBOX_TRUNCATE: _ClassVar[FerryPreprocess.LetterboxRounding]
    LETTERBOX_ROUNDING_DEFAULT: FerryPreprocess.LetterboxRounding
    LETTERBOX_ROUND: FerryPreprocess.LetterboxRounding
    LETTERBOX_TRUNCATE: FerryPreprocess.LetterboxRounding
    class LetterboxMapping(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        LETTERBOX_MAPPING_DEFAULT: _ClassVar[FerryPreprocess.LetterboxMapping]
        PER_AXIS: _ClassVar[FerryPreprocess.LetterboxMapping]
        LETTERBOX_GAIN: _ClassVar[FerryPreprocess.LetterboxMapping]
        LETTERBOX_GAIN_APPLIED_PADDING: _ClassVar[FerryPreprocess.LetterboxMapping]
    LETTERBOX_MAPPING_DEFAULT: FerryPreprocess.LetterboxMapping
    PER_AXIS: FerryPreprocess.LetterboxMapping
    LETTERBOX_GAIN: FerryPreprocess.LetterboxMapping
    LETTERBOX_GAIN_APPLIED_PADDING: FerryPreprocess.LetterboxMapping
    COLOR_ORDER_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    DATA_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESIZE_FIELD_NUMBER: _ClassVar[int]
    INTERPOLATION_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    MEAN_FIELD_NUMBER: _ClassVar[int]
    STD_FIELD_NUMBER: _ClassVar[int]
    PAD_VALUE_FIELD_NUMBER: _ClassVar[int]
    LETTERBOX_CORNER_FIELD_NUMBER: _ClassVar[int]
    RESIZE_SHORTER_FIELD_NUMBER: _ClassVar[int]
    MAX_PIXELS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    DECODE_FIELD_NUMBER: _ClassVar[int]
    RESIZE_ENGINE_FIELD_NUMBER: _ClassVar[int]
    CROP_ROUNDING_FIELD_NUMBER: _ClassVar[int]
    RESIZE_SHORTER_ROUNDING_FIELD_NUMBER: _ClassVar[int]
    PAD_THEN_RESIZE_FIELD_NUMBER: _ClassVar[int]
    DRAFT_DECODE_FIELD_NUMBER: _ClassVar[int]
    RESIZE_ALIGNMENT_FIELD_NUMBER: _ClassVar[int]
    LETTERBOX_ROUNDING_FIELD_NUMBER: _ClassVar[int]
    LETTERBOX_MAPPING_FIELD_NUMBER: _ClassVar[int]
    LIMIT_SIDE_LEN_FIELD_NUMBER: _ClassVar[int]
    LIMIT_TYPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_MULTIPLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_LINE_MIN_WIDTH_FIELD_NUMBER: _ClassVar[int]
    TEXT_LINE_MAX_WIDTH_FIELD_NUMBER: _ClassVar[int]
    PAD_TO_BATCH_FIELD_NUMBER: _ClassVar[int]
    color_order: FerryPreprocess.ColorOrder
    layout: FerryPreprocess.Layout
    data_type: DataType
    resize: FerryPreprocess.ResizeMode
    interpolation: FerryPreprocess.Interpolation
    scale: float
    mean: _containers.RepeatedScalarFieldContainer[float]
    std: _containers.RepeatedScalarFieldContainer[float]
    pad_value: float
    letterbox_corner: bool
    resize_shorter: int
    max_pixels: int
    device: FerryPreprocess.Device
    decode: FerryPreprocess.Device
    resize_engine: FerryPreprocess.ResizeEngine
    crop_rounding: FerryPreprocess.CropRounding
    resize_shorter_rounding: FerryPreprocess.SideRounding
    pad_then_resize: bool
    draft_decode: bool
    resize_alignment: FerryPreprocess.ResizeAlignment
    letterbox_rounding: FerryPreprocess.LetterboxRounding
    letterbox_mapping: FerryPreprocess.LetterboxMapping
    limit_side_len: int
    limit_type: FerryPreprocess.LimitType
    size_multiple: int
    text_line_min_width: int
    text_line_max_width: int
    pad_to_batch: bool
    def __init__(self, color_order: _Optional[_Union[FerryPreprocess.ColorOrder, str]] = ..., layout: _Optional[_Union[FerryPreprocess.Layout, str]] = ..., data_type: _Optional[_Union[DataType, str]] = ..., resize: _Optional[_Union[FerryPreprocess.ResizeMode, str]] = ..., interpolation: _Optional[_Union[FerryPreprocess.Interpolation, str]] = ..., scale: _Optional[float] = ..., mean: _Optional[_Iterable[float]] = ..., std: _Optional[_Iterable[float]] = ..., pad_value: _Optional[float] = ..., letterbox_corner: bool = ..., resize_shorter: _Optional[int] = ..., max_pixels: _Optional[int] = ..., device: _Optional[_Union[FerryPreprocess.Device, str]] = ..., decode: _Optional[_Union[FerryPreprocess.Device, str]] = ..., resize_engine: _Optional[_Union[FerryPreprocess.ResizeEngine, str]] = ..., crop_rounding: _Optional[_Union[FerryPreprocess.CropRounding, str]] = ..., resize_shorter_rounding: _Optional[_Union[FerryPreprocess.SideRounding, str]] = ..., pad_then_resize: bool = ..., draft_decode: bool = ..., resize_alignment: _Optional[_Union[FerryPreprocess.ResizeAlignment, str]] = ..., letterbox_rounding: _Optional[_Union[FerryPreprocess.LetterboxRounding, str]] = ..., letterbox_mapping: _Optional[_Union[FerryPreprocess.LetterboxMapping, str]] = ..., limit_side_len: _Optional[int] = ..., limit_type: _Optional[_Union[FerryPreprocess.LimitType, str]] = ..., size_multiple: _Optional[int] = ..., text_line_min_width: _Optional[int] = ..., text_line_max_width: _Optional[int] = ..., pad_to_batch: bool = ...) -> None: ...

class FerryEmbedding(_message.Message):
    __slots__ = ("output", "pooling", "l2_normalize")
    class Pooling(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        FLATTEN: _ClassVar[FerryEmbedding.Pooling]
        MEAN: _ClassVar[FerryEmbedding.Pooling]
        MAX: _ClassVar[FerryEmbedding.Pooling]
    FLATTEN: FerryEmbedding.Pooling
    MEAN: FerryEmbedding.Pooling
    MAX: FerryEmbedding.Pooling
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    POOLING_FIELD_NUMBER: _ClassVar[int]
    L2_NORMALIZE_FIELD_NUMBER: _ClassVar[int]
    output: str
    pooling: FerryEmbedding.Pooling
    l2_normalize: bool
    def __init__(self, output: _Optional[str] = ..., pooling: _Optional[_Union[FerryEmbedding.Pooling, str]] = ..., l2_normalize: bool = ...) -> None: ...

class FerryClassification(_message.Message):
    __slots__ = ("softmax", "top_k", "output")
    SOFTMAX_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    softmax: bool
    top_k: int
    output: str
    def __init__(self, softmax: bool = ..., top_k: _Optional[int] = ..., output: _Optional[str] = ...) -> None: ...

class FerryDetection(_message.Message):
    __slots__ = ("format", "score_threshold", "iou_threshold", "class_agnostic_nms", "max_detections", "outputs", "box_format", "strides", "anchors", "box_coder", "num_keypoints", "score_activation", "suppression", "top_k_per_level", "multi_label", "clip_boxes", "nms_plus_one_area", "dbnet")
    class DetectionFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        YOLOV8: _ClassVar[FerryDetection.DetectionFormat]
        YOLOV5: _ClassVar[FerryDetection.DetectionFormat]
        BOXES_SCORES_CLASSES: _ClassVar[FerryDetection.DetectionFormat]
        YOLOX: _ClassVar[FerryDetection.DetectionFormat]
        SSD: _ClassVar[FerryDetection.DetectionFormat]
        DFL: _ClassVar[FerryDetection.DetectionFormat]
        DETR: _ClassVar[FerryDetection.DetectionFormat]
        END_TO_END: _ClassVar[FerryDetection.DetectionFormat]
        DBNET: _ClassVar[FerryDetection.DetectionFormat]
    YOLOV8: FerryDetection.DetectionFormat
    YOLOV5: FerryDetection.DetectionFormat
    BOXES_SCORES_CLASSES: FerryDetection.DetectionFormat
    YOLOX: FerryDetection.DetectionFormat
    SSD: FerryDetection.DetectionFormat
    DFL: FerryDetection.DetectionFormat
    DETR: FerryDetection.DetectionFormat
    END_TO_END: FerryDetection.DetectionFormat
    DBNET: FerryDetection.DetectionFormat
    class ScoreActivation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SCORE_AS_IS: _ClassVar[FerryDetection.ScoreActivation]
        SIGMOID: _ClassVar[FerryDetection.ScoreActivation]
        SOFTMAX: _ClassVar[FerryDetection.ScoreActivation]
    SCORE_AS_IS: FerryDetection.ScoreActivation
    SIGMOID: FerryDetection.ScoreActivation
    SOFTMAX: FerryDetection.ScoreActivation
    class Suppression(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUPPRESSION_DEFAULT: _ClassVar[FerryDetection.Suppression]
        GREEDY_NMS: _ClassVar[FerryDetection.Suppression]
        WEIGHTED_NMS: _ClassVar[FerryDetection.Suppression]
        NO_NMS: _ClassVar[FerryDetection.Suppression]
    SUPPRESSION_DEFAULT: FerryDetection.Suppression
    GREEDY_NMS: FerryDetection.Suppression
    WEIGHTED_NMS: FerryDetection.Suppression
    NO_NMS: FerryDetection.Suppression
    class BoxFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        XYWH_CENTER: _ClassVar[FerryDetection.BoxFormat]
        XYXY: _ClassVar[FerryDetection.BoxFormat]
    XYWH_CENTER: FerryDetection.BoxFormat
    XYXY: FerryDetection.BoxFormat
    class BoxClipping(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        CLIP_DEFAULT: _ClassVar[FerryDetection.BoxClipping]
        CLIP: _ClassVar[FerryDetection.BoxClipping]
        NO_CLIP: _ClassVar[FerryDetection.BoxClipping]
    CLIP_DEFAULT: FerryDetection.BoxClipping
    CLIP: FerryDetection.BoxClipping
    NO_CLIP: FerryDetection.BoxClipping
    class DbNet(_message.Message):
        __slots__ = ("binarize_threshold", "unclip_ratio", "max_candidates", "dilation", "score_mode", "reading_order")
        class Dilation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
            __slots__ = ()
            DILATE: _ClassVar[FerryDetection.DbNet.Dilation]
            NO_DILATION: _ClassVar[FerryDetection.DbNet.Dilation]
        DILATE: FerryDetection.DbNet.Dilation
        NO_DILATION: FerryDetection.DbNet.Dilation
        class ScoreMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
            __slots__ = ()
            FAST: _ClassVar[FerryDetection.DbNet.ScoreMode]
            SLOW: _ClassVar[FerryDetection.DbNet.ScoreMode]
        FAST: FerryDetection.DbNet.ScoreMode
        SLOW: FerryDetection.DbNet.ScoreMode
        class ReadingOrder(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
            __slots__ = ()
            CONTOUR_ORDER: _ClassVar[FerryDetection.DbNet.ReadingOrder]
            NEIGHBOUR_SWAP: _ClassVar[FerryDetection.DbNet.ReadingOrder]
            LINE_GROUPS: _ClassVar[FerryDetection.DbNet.ReadingOrder]
        CONTOUR_ORDER: FerryDetection.DbNet.ReadingOrder
        NEIGHBOUR_SWAP: FerryDetection.DbNet.ReadingOrder
        LINE_GROUPS: FerryDetection.DbNet.ReadingOrder
        BINARIZE_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
        UNCLIP_RATIO_FIELD_NUMBER: _ClassVar[int]
        MAX_CANDIDATES_FIELD_NUMBER: _ClassVar[int]
        DILATION_FIELD_NUMBER: _ClassVar[int]
        SCORE_MODE_FIELD_NUMBER: _ClassVar[int]
        READING_ORDER_FIELD_NUMBER: _ClassVar[int]
        binarize_threshold: float
        unclip_ratio: float
        max_candidates: int
        dilation: FerryDetection.DbNet.Dilation
        score_mode: FerryDetection.DbNet.ScoreMode
        reading_order: FerryDetection.DbNet.ReadingOrder
        def __init__(self, binarize_threshold: _Optional[float] = ..., unclip_ratio: _Optional[float] = ..., max_candidates: _Optional[int] = ..., dilation: _Optional[_Union[FerryDetection.DbNet.Dilation, str]] = ..., score_mode: _Optional[_Union[FerryDetection.DbNet.ScoreMode, str]] = ..., reading_order: _Optional[_Union[FerryDetection.DbNet.ReadingOrder, str]] = ...) -> None: ...
    class SsdAnchors(_message.Message):
        __slots__ = ("num_layers", "min_scale", "max_scale", "anchor_offset_x", "anchor_offset_y", "strides", "aspect_ratios", "fixed_anchor_size", "interpolated_scale_aspect_ratio", "reduce_boxes_in_lowest_layer")
        NUM_LAYERS_FIELD_NUMBER: _ClassVar[int]
        MIN_SCALE_FIELD_NUMBER: _ClassVar[int]
        MAX_SCALE_FIELD_NUMBER: _ClassVar[int]
        ANCHOR_OFFSET_X_FIELD_NUMBER: _ClassVar[int]
        ANCHOR_OFFSET_Y_FIELD_NUMBER: _ClassVar[int]
        STRIDES_FIELD_NUMBER: _ClassVar[int]
        ASPECT_RATIOS_FIELD_NUMBER: _ClassVar[int]
        FIXED_ANCHOR_SIZE_FIELD_NUMBER: _ClassVar[int]
        INTERPOLATED_SCALE_ASPECT_RATIO_FIELD_NUMBER: _ClassVar[int]
        REDUCE_BOXES_IN_LOWEST_LAYER_FIELD_NUMBER: _ClassVar[int]
        num_layers: int
        min_scale: float
        max_scale: float
        anchor_offset_x: float
        anchor_offset_y: float
        strides: _containers.RepeatedScalarFieldContainer[int]
        aspect_ratios: _containers.RepeatedScalarFieldContainer[float]
        fixed_anchor_size: bool
        interpolated_scale_aspect_ratio: float
        reduce_boxes_in_lowest_layer: bool
        def __init__(self, num_layers: _Optional[int] = ..., min_scale: _Optional[float] = ..., max_scale: _Optional[float] = ..., anchor_offset_x: _Optional[float] = ..., anchor_offset_y: _Optional[float] = ..., strides: _Optional[_Iterable[int]] = ..., aspect_ratios: _Optional[_Iterable[float]] = ..., fixed_anchor_size: bool = ..., interpolated_scale_aspect_ratio: _Optional[float] = ..., reduce_boxes_in_lowest_layer: bool = ...) -> None: ...
    class BoxCoder(_message.Message):
        __slots__ = ("x_scale", "y_scale", "w_scale", "h_scale", "exp_size", "yx_order")
        X_SCALE_FIELD_NUMBER: _ClassVar[int]
        Y_SCALE_FIELD_NUMBER: _ClassVar[int]
        W_SCALE_FIELD_NUMBER: _ClassVar[int]
        H_SCALE_FIELD_NUMBER: _ClassVar[int]
        EXP_SIZE_FIELD_NUMBER: _ClassVar[int]
        YX_ORDER_FIELD_NUMBER: _ClassVar[int]
        x_scale: float
        y_scale: float
        w_scale: float
        h_scale: float
        exp_size: bool
        yx_order: bool
        def __init__(self, x_scale: _Optional[float] = ..., y_scale: _Optional[float] = ..., w_scale: _Optional[float] = ..., h_scale: _Optional[float] = ..., exp_size: bool = ..., yx_order: bool = ...) -> None: ...
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    SCORE_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    IOU_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    CLASS_AGNOSTIC_NMS_FIELD_NUMBER: _ClassVar[int]
    MAX_DETECTIONS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    BOX_FORMAT_FIELD_NUMBER: _ClassVar[int]
    STRIDES_FIELD_NUMBER: _ClassVar[int]
    ANCHORS_FIELD_NUMBER: _ClassVar[int]
    BOX_CODER_FIELD_NUMBER: _ClassVar[int]
    NUM_KEYPOINTS_FIELD_NUMBER: _ClassVar[int]
    SCORE_ACTIVATION_FIELD_NUMBER: _ClassVar[int]
    SUPPRESSION_FIELD_NUMBER: _ClassVar[int]
    TOP_K_PER_LEVEL_FIELD_NUMBER: _ClassVar[int]
    MULTI_LABEL_FIELD_NUMBER: _ClassVar[int]
    CLIP_BOXES_FIELD_NUMBER: _ClassVar[int]
    NMS_PLUS_ONE_AREA_FIELD_NUMBER: _ClassVar[int]
    DBNET_FIELD_NUMBER: _ClassVar[int]
    format: FerryDetection.DetectionFormat
    score_threshold: float
    iou_threshold: float
    class_agnostic_nms: bool
    max_detections: int
    outputs: _containers.RepeatedScalarFieldContainer[str]
    box_format: FerryDetection.BoxFormat
    strides: _containers.RepeatedScalarFieldContainer[int]
    anchors: FerryDetection.SsdAnchors
    box_coder: FerryDetection.BoxCoder
    num_keypoints: int
    score_activation: FerryDetection.ScoreActivation
    suppression: FerryDetection.Suppression
    top_k_per_level: int
    multi_label: bool
    clip_boxes: FerryDetection.BoxClipping
    nms_plus_one_area: bool
    dbnet: FerryDetection.DbNet
    def __init__(self, format: _Optional[_Union[FerryDetection.DetectionFormat, str]] = ..., score_threshold: _Optional[float] = ..., iou_threshold: _Optional[float] = ..., class_agnostic_nms: bool = ..., max_detections: _Optional[int] = ..., outputs: _Optional[_Iterable[str]] = ..., box_format: _Optional[_Union[FerryDetection.BoxFormat, str]] = ..., strides: _Optional[_Iterable[int]] = ..., anchors: _Optional[_Union[FerryDetection.SsdAnchors, _Mapping]] = ..., box_coder: _Optional[_Union[FerryDetection.BoxCoder, _Mapping]] = ..., num_keypoints: _Optional[int] = ..., score_activation: _Optional[_Union[FerryDetection.ScoreActivation, str]] = ..., suppression: _Optional[_Union[FerryDetection.Suppression, str]] = ..., top_k_per_level: _Optional[int] = ..., multi_label: bool = ..., clip_boxes: _Optional[_Union[FerryDetection.BoxClipping, str]] = ..., nms_plus_one_area: bool = ..., dbnet: _Optional[_Union[FerryDetection.DbNet, _Mapping]] = ...) -> None: ...
