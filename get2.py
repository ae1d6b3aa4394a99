import asyncio, nats, json
async def main():
    nc = await nats.connect("nats://127.0.0.1:14222")
    r = await nc.request("$JS.API.STREAM.INFO.ORDERS", b"")
    print(json.loads(r.data).get("state") or json.loads(r.data))
    for seq in [1,14,15,16,30]:
        r = await nc.request("$JS.API.STREAM.MSG.GET.ORDERS", json.dumps({"seq":seq}).encode())
        d=json.loads(r.data); print(seq, d.get("error") or d["message"]["seq"])
    await nc.drain()
asyncio.run(main())
