"""The serve host's proxy passes a compressed request on as it came: the server, not the
proxy, decompresses it (decompressed here, it reached Triton still labelled gzip: 400)."""

from __future__ import annotations

import asyncio
import gzip

from aiohttp import ClientSession, web

from pipeline.host.proxy import ReverseProxy, Upstream


def test_a_gzipped_request_reaches_the_server_as_sent() -> None:
    body = b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]}]}'
    packed = gzip.compress(body)

    async def scenario() -> tuple[str | None, bytes, int]:
        seen: dict[str, object] = {}

        async def infer(request: web.Request) -> web.Response:
            seen["encoding"] = request.headers.get("Content-Encoding")
            seen["body"] = await request.read()
            return web.json_response({"ok": True})

        backend = web.Application()
        backend.router.add_post("/v2/models/m/infer", infer)
        runner = web.AppRunner(backend, auto_decompress=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        backend_port = runner.addresses[0][1]
        proxy = ReverseProxy("127.0.0.1", 0, lambda: {})
        await proxy.start()
        upstream = Upstream("r1", f"http://127.0.0.1:{backend_port}")
        proxy.switch(upstream)
        try:
            async with ClientSession() as client, client.post(
                    f"http://127.0.0.1:{proxy.port}/v2/models/m/infer", data=packed,
                    headers={"Content-Encoding": "gzip"}) as reply:
                status = reply.status
        finally:
            await upstream.close()
            await proxy.close()
            await runner.cleanup()
        return seen.get("encoding"), seen.get("body"), status  # type: ignore[return-value]

    encoding, received, status = asyncio.run(scenario())
    assert status == 200
    assert encoding == "gzip" and gzip.decompress(received) == body
