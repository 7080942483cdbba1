// Command registry_server serves an in-memory Confluent Schema Registry REST API (franz-go's srfake) on
// 127.0.0.1 for lakesink's tests and demos: `lakesink deps` builds it, connector/local/registry.py starts it.
package main

import (
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/twmb/franz-go/pkg/sr/srfake"
)

func main() {
	port := flag.Int("port", 0, "port on 127.0.0.1 to listen on (0 picks a free one)")
	user := flag.String("user", "", "user:password that every request must send as HTTP basic auth (empty: none)")
	flag.Parse()

	var opts []srfake.Option
	if *user != "" {
		opts = append(opts, srfake.WithAuth("Basic "+base64.StdEncoding.EncodeToString([]byte(*user))))
	}
	listener, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(*port)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "registry_server:", err)
		os.Exit(1)
	}
	server := &http.Server{Handler: srfake.NewRegistry(opts...).Handler()}
	served := make(chan error, 1)
	go func() { served <- server.Serve(listener) }()
	fmt.Printf("schema registry listening on http://%s\n", listener.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	select {
	case <-ctx.Done():
		server.Shutdown(context.Background()) // finishes the requests in flight, then returns
	case err := <-served:
		fmt.Fprintln(os.Stderr, "registry_server:", err)
		os.Exit(1)
	}
}
