// Avahi's client library (apt: libavahi-client-dev), for DNS-SD: atriumd advertises
// _atrium._tcp through it, and clients browse for it.
#if defined(__has_include) && !__has_include(<avahi-client/client.h>)
#error "Avahi's client headers are missing (Debian package libavahi-client-dev); Atrium also needs libffi-dev. Install both with `sudo apt-get install libavahi-client-dev libffi-dev` (or run Scripts/ensure-deps.sh), then build again"
#endif
#include <avahi-client/client.h>
#include <avahi-client/lookup.h>
#include <avahi-client/publish.h>
#include <avahi-common/address.h>
#include <avahi-common/alternative.h>
#include <avahi-common/error.h>
#include <avahi-common/malloc.h>
#include <avahi-common/strlst.h>
#include <avahi-common/thread-watch.h>
