"""Element types of the core (mirror of hvd::DataType in cpp/include/horovod/types.h)."""

UINT8 = 0
INT8 = 1
UINT16 = 2
INT16 = 3
INT32 = 4
INT64 = 5
FLOAT16 = 6
BFLOAT16 = 7
FLOAT32 = 8
FLOAT64 = 9
BOOL = 10

NAMES = {
    UINT8: 'uint8', INT8: 'int8', UINT16: 'uint16', INT16: 'int16', INT32: 'int32',
    INT64: 'int64', FLOAT16: 'float16', BFLOAT16: 'bfloat16', FLOAT32: 'float32',
    FLOAT64: 'float64', BOOL: 'bool',
}
