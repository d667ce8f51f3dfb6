#pragma once
// The whole public API.
#include "flashpage/attention.h"
#include "flashpage/device.h"
#include "flashpage/dlpack.h"
#include "flashpage/dtype.h"
#include "flashpage/error.h"
#include "flashpage/kv_cache.h"
#include "flashpage/ops.h"
#include "flashpage/tensor.h"
