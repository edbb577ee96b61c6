#!/usr/bin/env python3
"""A TCP proxy on loopback that delays every byte by a fixed time each way, in order: a
network's round trip where the kernel has no netem (BENCHMARKS.md, "Small files").

    python3 Benchmarks/delay_proxy.py TARGET_PORT DELAY_MS

prints "port N" (where it listens on 127.0.0.1), then forwards each connection to
127.0.0.1:TARGET_PORT, every read held DELAY_MS before it is written on (so a round trip gains
twice DELAY_MS, and the event loop's timer slack: with 1 ms, a request's round trip through it
measured about 3 ms here). It stops when its standard input closes.
"""
import asyncio
import sys


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    loop = asyncio.get_running_loop()
    queue: "asyncio.Queue[tuple[float, bytes]]" = asyncio.Queue()

    async def send() -> None:
        while True:
            due, data = await queue.get()
            if not data:
                break
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    sending = asyncio.ensure_future(send())
    try:
        while True:
            data = await reader.read(1 << 20)
            queue.put_nowait((loop.time() + delay, data))
            if not data:
                break
    except ConnectionError:
        queue.put_nowait((0, b""))
    await sending


async def main() -> None:
    target, delay = int(sys.argv[1]), float(sys.argv[2]) / 1000

    async def connected(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            host_reader, host_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(pump(client_reader, host_writer, delay), pump(host_reader, client_writer, delay),
                             return_exceptions=True)

    server = await asyncio.start_server(connected, "127.0.0.1", 0)
    print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
    loop = asyncio.get_running_loop()
    # Runs until standard input closes (the benchmark that started it is done).
    await loop.run_in_executor(None, sys.stdin.read)
    server.close()


if __name__ == "__main__":
    asyncio.run(main())
