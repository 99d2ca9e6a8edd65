// The default calibration text of the AWQ scale search (`voltllm convert --quantization awq` without
// --calibration): about 17 KB of the demo model's training text; how it was made: calibration_text.cc.
#pragma once

namespace volt::model {

const char* default_calibration_text();

}  // namespace volt::model
