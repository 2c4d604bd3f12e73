// Preloaded by run.sh (node --require): Portkey's start-server.js takes a
// port but no host, and Node then listens on every interface. A rehearsal
// needs it on loopback only, so listen() is given 127.0.0.1 when it is
// called without a host. Nothing of Portkey itself is changed.
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number" && typeof args[1] !== "string") {
    args.splice(1, 0, "127.0.0.1");
  } else if (args[0] && typeof args[0] === "object" && args[0].port !== undefined && !args[0].host) {
    args[0] = { ...args[0], host: "127.0.0.1" };
  }
  return listen.apply(this, args);
};
