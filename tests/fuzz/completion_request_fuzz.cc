// libFuzzer: the body parser of the completion route (request_fuzz.h).
#include "request_fuzz.h"

VOLT_REQUEST_FUZZER(volt::server::parse_completion_request)
