// A TCP port for a test that must name its port in advance (a supervised server keeps its port across
// restarts; rank 0's --master-port). No npm package: chaos.test.mjs imports nothing but node's own modules.
//
// Why not the port of a listen(0) that is closed again: the kernel hands out ports of its ephemeral range
// (ip_local_port_range, 32768-60999 on Linux) to every listen(0) and outgoing connection, so a port freed
// this way can be given to another test's `serve --port 0` running at the same time. That happened on
// 2026-12-06: api_multiprocess's server took api_chaos's port, the router admitted that stranger as a backend,
// and api_chaos's own server could not bind and never got ready. A port below the ephemeral range is never
// handed out by the kernel; a random one that binds now is taken only by another test that named it too.
import net from "node:net";

const LOW = 20000, HIGH = 32000;  // below Linux's default ephemeral range (32768-60999)

function tryListen(port) {
    return new Promise((resolve) => {
        const s = net.createServer();
        s.once("error", () => resolve(false));
        s.listen(port, "127.0.0.1", () => s.close(() => resolve(true)));
    });
}

/** A port in [20000, 32000) that 127.0.0.1 can listen on now; `count` consecutive ports free from it. */
export async function fixedPort(count = 1) {
    for (let attempt = 0; attempt < 200; attempt++) {
        const p = LOW + Math.floor(Math.random() * (HIGH - LOW - count));
        let ok = true;
        for (let i = 0; i < count && ok; i++) ok = await tryListen(p + i);
        if (ok) return p;
    }
    throw new Error(`fixedPort: no ${count} free consecutive port(s) in [${LOW}, ${HIGH}) after 200 tries`);
}
