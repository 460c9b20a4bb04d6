// Preloaded into a peer run with node (bench/peers/peers.sh): every listening socket of
// the process binds 127.0.0.1, because the benchmark's servers listen on loopback only.
import net from "node:net";

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number" && (args[1] === undefined || typeof args[1] === "function")) {
    args.splice(1, args[1] === undefined ? 1 : 0, "127.0.0.1");
  } else if (args[0] && typeof args[0] === "object" && !args[0].host && !args[0].path) {
    args[0] = { ...args[0], host: "127.0.0.1" };
  }
  return listen.apply(this, args);
};
