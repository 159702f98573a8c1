"""A small userspace TCP proxy that delays every byte by a fixed time each way (this kernel has no `netem`).

    python delay_proxy.py LISTEN_HOST:PORT TARGET_HOST:PORT DELAY_MS [LISTEN:TARGET:DELAY ...]

Each connection to LISTEN is forwarded to TARGET; what is read from either side is written to the other
`DELAY_MS` milliseconds after it was read, in order (a link with that one-way latency and unlimited
bandwidth). Several `LISTEN TARGET DELAY` triples may be given (one process, one event loop). It prints
`ready` once every listener is bound, and runs until killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()

    async def read() -> None:
        while True:
            data = await reader.read(65536)
            await queue.put((loop.time() + delay_s, data))
            if not data:
                return

    async def write() -> None:
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                with contextlib.suppress(OSError):
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    try:
        await asyncio.gather(read(), write())
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def _serve(listen: str, target: str, delay_s: float) -> asyncio.AbstractServer:
    host, port = listen.rsplit(":", 1)
    to_host, to_port = target.rsplit(":", 1)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(to_host, int(to_port))
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer, delay_s), _pipe(up_reader, writer, delay_s))

    return await asyncio.start_server(handle, host, int(port), reuse_address=True)


async def main(args: list[str]) -> None:
    servers = [await _serve(args[i], args[i + 1], float(args[i + 2]) / 1000) for i in range(0, len(args), 3)]
    print("ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
