package docker

import (
	"context"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

// hostOverrideEnv is testcontainers' setting for the host at which
// published ports are reached.
const hostOverrideEnv = "TESTCONTAINERS_HOST_OVERRIDE"

var hostOnce sync.Once

// fixPublishedHost points testcontainers at 127.0.0.1 for published ports
// where its guess is wrong. Seeing /.dockerenv, testcontainers assumes it
// runs in a sibling container of the daemon and reaches published ports
// through a gateway address. When this process instead shares the daemon's
// network namespace (the daemon runs inside the same container, as on this
// project's machines), nothing is published there and every wait times
// out. The daemon's bridge gateway being one of our own addresses tells the
// two cases apart. An explicit TESTCONTAINERS_HOST_OVERRIDE always wins.
func fixPublishedHost(ctx context.Context) {
	hostOnce.Do(func() {
		if _, set := os.LookupEnv(hostOverrideEnv); set {
			return
		}
		if _, err := os.Stat("/.dockerenv"); err != nil {
			return
		}
		if sharesDaemonNetwork(ctx) {
			os.Setenv(hostOverrideEnv, "127.0.0.1")
		}
	})
}

// sharesDaemonNetwork reports whether the daemon is reached over a local
// socket and its default bridge's gateway is an address of this host.
func sharesDaemonNetwork(ctx context.Context) bool {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return false
	}
	defer cli.Close()
	if !strings.HasPrefix(cli.DaemonHost(), "unix://") {
		return false
	}
	nw, err := cli.NetworkInspect(ctx, "bridge", client.NetworkInspectOptions{})
	if err != nil {
		return false
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, cfg := range nw.Network.IPAM.Config {
		gw := cfg.Gateway
		if !gw.IsValid() && cfg.Subnet.IsValid() {
			// Older daemons leave the default bridge's gateway out; it is
			// the subnet's first address (172.17.0.1), which no container
			// on that bridge ever has.
			gw = cfg.Subnet.Masked().Addr().Next()
		}
		if !gw.IsValid() {
			continue
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(ipn.IP); ok && ip.Unmap() == gw.Unmap() {
					return true
				}
			}
		}
	}
	return false
}
