// Command etcd is the upstream etcd server, built from the official go.etcd.io module
// at the version pinned in go.mod (3.6.x, the line Kubernetes 1.36 is tested against).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
