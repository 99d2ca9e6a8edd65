// libFuzzer: the body parser of the detokenize route (request_fuzz.h).
#include "request_fuzz.h"

VOLT_REQUEST_FUZZER(volt::server::parse_detokenize_request)
