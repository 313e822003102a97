"""The official MCP Python SDK on both sides of agentgate (tests/e2e/mcp.rs).

server CERT KEY LOG [json|sse|legacy]: an MCP server with tools search, delete_repo and
    create_issue over Streamable HTTP on TLS (127.0.0.1, a free port it prints as
    "listening PORT"), appending the name of each tool it runs to LOG; it answers POSTs as
    JSON or as an event stream, or (legacy) speaks the older HTTP+SSE transport (/sse).
client URL PROXY CA [CALL...]: the SDK client (the HTTP+SSE one for a URL ending in /sse)
    through PROXY (an http:// proxy URL, with
    credentials), trusting CA; it lists the tools, then calls each CALL (tool=query) in order,
    and prints one JSON object: {"tools": [...], "calls": [{"tool", "ok", "text"}...],
    "answered_as": [the media type of each POST's answer]}.
"""

import json
import socket
import ssl
import sys

import anyio


def serve(cert, key, log, mode):
    import uvicorn
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("tracker")

    def ran(name):
        with open(log, "a") as out:
            out.write(name + "\n")

    @server.tool()
    def search(query: str) -> str:
        """Searches the issue tracker."""
        ran("search")
        return f"3 issues match {query}"

    @server.tool()
    def delete_repo(repo: str) -> str:
        """Deletes a repository."""
        ran("delete_repo")
        return f"deleted {repo}"

    @server.tool()
    def create_issue(title: str) -> str:
        """Opens an issue."""
        ran("create_issue")
        return f"opened {title}"

    if mode == "legacy":
        app = server.sse_app(host="localhost")
    else:
        app = server.streamable_http_app(json_response=(mode == "json"), host="localhost")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    print(f"listening {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, ssl_certfile=cert, ssl_keyfile=key, log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])


async def client(url, proxy, ca, calls):
    import httpx2
    from mcp import ClientSession, MCPError
    from mcp.client.sse import sse_client
    from mcp.client.streamable_http import streamable_http_client

    context = ssl.create_default_context(cafile=ca)
    out = {"tools": [], "calls": [], "answered_as": []}

    async def answered(response):
        if response.request.method == "POST":
            out["answered_as"].append(response.headers.get("content-type", "").split(";")[0])

    def factory(headers=None, timeout=None, auth=None):
        return httpx2.AsyncClient(
            proxy=proxy,
            verify=context,
            headers=headers,
            timeout=httpx2.Timeout(20.0),
            auth=auth,
            trust_env=False,
            event_hooks={"response": [answered]},
        )

    if url.endswith("/sse"):
        transport = sse_client(url, httpx_client_factory=factory)
    else:
        transport = streamable_http_client(url, http_client=factory())
    async with transport as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            out["tools"] = sorted(tool.name for tool in listed.tools)
            for call in calls:
                tool, _, query = call.partition("=")
                key = {"search": "query", "delete_repo": "repo", "create_issue": "title"}.get(tool, "query")
                try:
                    result = await session.call_tool(tool, {key: query})
                    text = " ".join(getattr(c, "text", "") for c in result.content)
                    out["calls"].append({"tool": tool, "ok": not result.is_error, "text": text})
                except MCPError as error:
                    out["calls"].append({"tool": tool, "ok": False, "text": str(error)})
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "server":
        serve(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] if len(sys.argv) > 5 else "json")
    else:
        anyio.run(client, sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
