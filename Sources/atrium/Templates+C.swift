import Foundation

extension Templates {
    static func cPlugin(_ names: Names) -> [String: String] {
        let library = "lib\(names.name).so"
        // Every symbol the file defines is prefixed with the name (and is static but the entry
        // point), so that no name clashes with the header's.
        let prefix = "\(names.cName)_service"
        let source = #"""
            /* \#(names.name): an Atrium app service in C.
             *
             *   {"Command": "hello", "Name": "Ada"}  ->  {"Greeting": "Hello, Ada!"}
             *   anything else                        ->  status 1 (Failure), with the reason
             *
             * Messages are read and built through the host table: no CBOR by hand. */
            #include <stdlib.h>
            #include <string.h>

            #include "atrium_plugin.h"

            static int32_t \#(prefix)_create(const atrium_host_api *host, const char *config_json, void **instance) {
                (void)config_json;
                *instance = (void *)host; /* the host table lives until destroy */
                return ATRIUM_OK;
            }

            static void \#(prefix)_fail(const atrium_host_api *host, uint64_t request, const char *reason) {
                host->respond(host, request, ATRIUM_RESPONSE_FAILURE, NULL, 0, reason);
            }

            /* Answers {"Greeting": "Hello, NAME!"}, or a failure with the reason. */
            static void \#(prefix)_hello(const atrium_host_api *host, uint64_t request, const atrium_message *in) {
                const char *name = "world";
                size_t name_length = 5;
                int32_t found = host->message_get_string(host, in, "Name", &name, &name_length);
                if (found == ATRIUM_E_WRONG_KIND) {
                    \#(prefix)_fail(host, request, "Name must be a string");
                    return;
                }
                /* "Hello, " + the name + "!", as long as the name needs. */
                size_t greeting_length = 7 + name_length + 1;
                char *greeting = malloc(greeting_length);
                if (greeting == NULL) {
                    \#(prefix)_fail(host, request, "out of memory");
                    return;
                }
                memcpy(greeting, "Hello, ", 7);
                memcpy(greeting + 7, name, name_length);
                greeting[7 + name_length] = '!';

                atrium_builder *out = host->builder_new(host);
                const uint8_t *answer = NULL;
                size_t answer_length = 0;
                if (out != NULL && host->builder_put_string(host, out, "Greeting", greeting, greeting_length) == ATRIUM_OK &&
                    host->builder_bytes(host, out, &answer, &answer_length) == ATRIUM_OK) {
                    host->respond(host, request, ATRIUM_RESPONSE_SUCCESS, answer, answer_length, NULL);
                } else {
                    \#(prefix)_fail(host, request, "the answer could not be built");
                }
                if (out != NULL) host->builder_free(host, out);
                free(greeting);
            }

            static void \#(prefix)_request(void *instance, uint64_t channel, uint64_t request,
                                       const uint8_t *message, size_t length) {
                (void)channel;
                const atrium_host_api *host = instance;
                atrium_message *in = host->message_parse(host, message, length);
                if (in == NULL) {
                    \#(prefix)_fail(host, request, "not a ValueSet");
                    return;
                }
                const char *command = NULL;
                size_t command_length = 0;
                if (host->message_get_string(host, in, "Command", &command, &command_length) == ATRIUM_OK &&
                    command_length == 5 && memcmp(command, "hello", 5) == 0) {
                    \#(prefix)_hello(host, request, in);
                } else {
                    \#(prefix)_fail(host, request, "unknown command: send Command=hello (and Name=...)");
                }
                host->message_free(host, in);
            }

            static const atrium_plugin \#(prefix)_descriptor = {
                .struct_size = sizeof(atrium_plugin),
                .abi_major = ATRIUM_PLUGIN_ABI_MAJOR,
                .abi_minor = ATRIUM_PLUGIN_ABI_MINOR,
                .name = "\#(names.name)",
                .version = "0.1.0",
                .create = \#(prefix)_create,
                .request = \#(prefix)_request,
            };

            ATRIUM_PLUGIN_EXPORT const atrium_plugin *atrium_plugin_entry_v1(void) { return &\#(prefix)_descriptor; }

            """#
        let makefile = """
            # Builds \(library), the plugin, with nothing but Atrium's C header.
            ATRIUM_INCLUDE ?= \(makeValue(shellQuoted(names.include)))
            CFLAGS ?= -std=gnu11 -O2 -g -Wall -Wextra

            \(library): \(names.name).c
            \t$(CC) $(CFLAGS) -shared -fPIC -I$(ATRIUM_INCLUDE) -o $@ \(names.name).c
            \t@# atriumd loads only a library no one else can write, whatever the umask.
            \tchmod go-w $@

            # Builds, then runs the plugin in atriumd and checks its answer.
            check: \(library)
            \t./test.sh

            clean:
            \trm -f \(library)

            .PHONY: check clean

            """
        let readme = """
            # \(names.name)

            An Atrium app service in C: package `\(names.package)`, service `\(names.service)`.
            It answers `{"Command": "hello", "Name": "Ada"}` with `{"Greeting": "Hello, Ada!"}`.

            ```sh
            make                 # builds \(library) against atrium_plugin.h
            ./test.sh            # checks the manifest, runs the plugin in atriumd, sends it hello
            atriumd --manifests . --plugin-path .     # serves it (local clients only: see \(names.name).json)
            atrium send --local --package \(names.package) --service \(names.service) Command=hello Name=Ada
            ```

            - `\(names.name).c`: the service. Messages are read and built through the host table
              (`message_get_string`, `builder_put_string`, ...): see the header's comments.
            - `\(names.name).json`: the manifest. `"access": "local"` serves local clients only;
              `"paired"` serves paired devices over the network too. `"commands"` declares what
              the service takes: the host refuses a request that does not match, with the
              reason, before the plugin sees it; `atrium describe \(names.package)
              --local` prints it.
            - To install it: copy `\(library)` to the host's plugin folder and `\(names.name).json`
              to its manifests folder (`/etc/atrium/manifests.d`), then reload the host (SIGHUP).

            """
        return [
            "\(names.name).c": source,
            "\(names.name).json": manifest(names, library: library),
            "Makefile": makefile,
            "test.sh": testScript(names, build: "make", library: "./\(library)"),
            "README.md": readme,
            ".gitignore": "\(library)\n",
        ]
    }
}
