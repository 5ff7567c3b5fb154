// How an exception a plugin throws reads on the host. componentize-js's runtime prints an
// uncaught exception's message and stack to stderr, but not its type: `announce` prints
// `Type: message` first, and the host reads the type from that line. The stack's lines
// name the bundle (`plugin.js:67:3`): build.mjs embeds the bundle's source map in the
// component, and the host reads each such place back as the author's file and line.

/** Says `e`'s type and message on stderr, for the host, and gives `e` back to rethrow. */
export function announce(e) {
  if (e instanceof Error) console.error(`${e.name}: ${e.message}`);
  return e;
}

/** `Type: message (at place)`: an exception in one line, where it was raised included. */
export function describe(e) {
  if (!(e instanceof Error)) return String(e);
  const text = `${e.name}: ${e.message}`;
  const frame = String(e.stack ?? '').split('\n').find((l) => l.includes('@'));
  return frame ? `${text} (at ${frame.slice(frame.indexOf('@') + 1)})` : text;
}
