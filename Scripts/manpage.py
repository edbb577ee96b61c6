#!/usr/bin/env python3
"""Writes a man page (roff, section 1) from what a tool says of itself: the JSON of the
argument parser's `TOOL --experimental-dump-help` (its commands, options, help and defaults),
so that the page says exactly what `--help` says.

    Scripts/manpage.py atriumd.json atriumd.1
"""
import json
import sys


def roff(text):
    """Text as roff prints it: backslashes and leading dots or quotes escaped."""
    lines = []
    for line in (text or "").replace("\\", "\\e").split("\n"):
        if line.startswith((".", "'")):
            line = "\\&" + line
        lines.append(line)
    return "\n".join(lines)


def names(argument):
    spelled = []
    for name in argument.get("names", []):
        spelled.append(("--" if name["kind"] == "long" else "-") + name["name"])
    return ", ".join(spelled)


def synopsis_part(argument):
    value = argument.get("valueName", "value")
    if argument["kind"] == "positional":
        part = f"<{value}>"
    else:
        first = argument.get("preferredName") or (argument.get("names") or [{"kind": "long", "name": value}])[0]
        flag = ("--" if first["kind"] == "long" else "-") + first["name"]
        part = flag if argument["kind"] == "flag" else f"{flag} <{value}>"
    if argument.get("isRepeating"):
        part += " ..."
    return f"[{part}]" if argument.get("isOptional") else part


def section(command, path, out):
    visible = [a for a in command.get("arguments", []) if a.get("shouldDisplay", True)]
    out.append(".SH SYNOPSIS" if not path[1:] else f'.SS "{" ".join(path)}"')
    out.append(".B " + " ".join(path))
    out.append(roff(" ".join(synopsis_part(a) for a in visible)))
    if path[1:]:
        out.append(".PP")
        out.append(roff(command.get("abstract", "")))
    if command.get("discussion"):
        if not path[1:]:
            out.append(".SH DESCRIPTION")
        out.append(".PP")
        out.append(".nf")
        out.append(roff(command["discussion"]))
        out.append(".fi")
    if visible:
        if not path[1:]:
            out.append(".SH OPTIONS")
        for argument in visible:
            label = names(argument) if argument["kind"] != "positional" else f"<{argument.get('valueName', '')}>"
            if argument["kind"] == "option":
                label += f" <{argument.get('valueName', 'value')}>"
            out.append(".TP")
            out.append(".B " + roff(label))
            text = argument.get("abstract", "")
            if argument.get("defaultValue") not in (None, ""):
                text += f" (default: {argument['defaultValue']})"
            if argument.get("allValues"):
                text += " (values: " + ", ".join(argument["allValues"]) + ")"
            out.append(roff(text))
    for sub in command.get("subcommands", []):
        if sub.get("shouldDisplay", True) and sub["commandName"] != "help":
            if not path[1:] and sub is command.get("subcommands", [])[0]:
                out.append(".SH COMMANDS")
            section(sub, path + [sub["commandName"]], out)


def main():
    source, target = sys.argv[1], sys.argv[2]
    with open(source) as file:
        command = json.load(file)["command"]
    name = command["commandName"]
    out = [f'.TH {name.upper()} 1 "" "Atrium" "Atrium manual"', ".SH NAME", f"{name} \\- {roff(command.get('abstract', ''))}"]
    section(command, [name], out)
    out += [".SH SEE ALSO", ".BR atriumd (1),", ".BR atrium (1)"]
    with open(target, "w") as file:
        file.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
