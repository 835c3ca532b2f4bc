// Command etcd is etcd 3.6 built from its Go module, for the lab and envtest.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
