// Compiled as C++17 by CMake (volt_ops_cxx17_check): fails the build when an ops header needs C++20.
#include "ops/communicator.h"
#include "ops/kv_int8.h"
#include "ops/ops.h"
#include "ops/sample.h"
#include "ops/weights.h"
