// Not compiled: the include below is what the layering check of this test project must refuse.
#include "mesh/comm/communicator.h"
