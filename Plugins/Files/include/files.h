/* Files exports only atrium_plugin_entry_v1; it has no public header of its own. */
