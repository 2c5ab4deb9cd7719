// Umbrella header: everything a program that trains with mixprec needs.
#pragma once

#include "mixprec/allocator.h"
#include "mixprec/convert.h"
#include "mixprec/cpu_features.h"
#include "mixprec/device.h"
#include "mixprec/dtype.h"
#include "mixprec/error.h"
#include "mixprec/half.h"
#include "mixprec/rng.h"
#include "mixprec/shape.h"
#include "mixprec/tensor.h"
#include "mixprec/version.h"
