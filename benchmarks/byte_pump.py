"""A reference relay for `gateway_overhead.py`: copies bytes between client and upstream.

It parses nothing, admits nothing and counts nothing: one upstream connection per client
connection, bytes copied both ways as they arrive (asyncio streams on uvloop, as the gateway
runs). What it adds to time-to-first-token is the floor any Python relay pays on this machine
for one more process and two more hops; the gateway's figure above it is the cost of its work.

    python benchmarks/byte_pump.py LISTEN_PORT UPSTREAM_PORT
"""

from __future__ import annotations

import asyncio
import sys


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
    finally:
        writer.close()


async def serve(port: int, upstream_port: int) -> None:
    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
        await asyncio.gather(
            pump(reader, up_writer), pump(up_reader, writer), return_exceptions=True
        )

    server = await asyncio.start_server(relay, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> int:
    import uvloop

    uvloop.install()
    asyncio.run(serve(int(argv[0]), int(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
