// Compile-time checks of the ABI's layout on this platform; the module itself has no code.
#include "atrium_plugin.h"

_Static_assert(offsetof(atrium_plugin, struct_size) == 0, "struct_size comes first");
_Static_assert(offsetof(atrium_host_api, struct_size) == 0, "struct_size comes first");
_Static_assert(offsetof(atrium_channel_info, struct_size) == 0, "struct_size comes first");
_Static_assert(offsetof(atrium_launch_info, struct_size) == 0, "struct_size comes first");
