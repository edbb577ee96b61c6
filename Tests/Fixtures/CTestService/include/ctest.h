/* The C test service exports only atrium_plugin_entry_v1. */
