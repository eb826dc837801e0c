// Command demo plays an external service against a running rendezvous: it stores the
// example definition under a name of its own (order-approval-demo), pointing at itself,
// so that the order-approval that rendezvous dev loaded is left as it was; starts executions, answers every correlated
// call with a callback (in random order, some twice), and reports when every execution
// has completed and how often each continuation reached it.
//
//	go run ./examples/demo -server http://127.0.0.1:8080 -n 200
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

type pending struct{ Exec, Corr string }

func main() {
	server := flag.String("server", "http://127.0.0.1:8080", "rendezvous HTTP address")
	// Not 9090: rendezvous dev's stand-in for the examples' service listens there.
	listen := flag.String("listen", "127.0.0.1:9091", "where this fake external service listens")
	name := flag.String("name", "order-approval-demo", "workflow name to store the definition under; its own, so that the example dev loaded keeps working after the demo exits")
	n := flag.Int("n", 200, "executions to start")
	def := flag.String("definition", "examples/order-approval.json", "definition to store (its vars.serviceUrl is pointed at -listen)")
	flag.Parse()
	if err := run(*server, *listen, *def, *name, *n); err != nil {
		log.Fatal(err)
	}
}

func run(server, listen, defPath, name string, n int) error {
	var mu sync.Mutex
	calls := make(chan pending, n)
	notified := map[string]int{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /approvals", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		calls <- pending{Exec: r.Header.Get("X-Execution-Id"), Corr: r.Header.Get("X-Correlation-Id")}
		w.WriteHeader(http.StatusAccepted) // the answer comes later, as a callback
	})
	mux.HandleFunc("POST /notifications", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		notified[fmt.Sprint(body["order"])]++
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	})
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	go func() { _ = http.Serve(ln, mux) }()

	raw, err := os.ReadFile(defPath)
	if err != nil {
		return err
	}
	var def map[string]any
	if err := json.Unmarshal(raw, &def); err != nil {
		return err
	}
	def["vars"] = map[string]any{"serviceUrl": "http://" + listen, "token": "demo"}
	def["name"] = name
	if code, body := call("PUT", server+"/api/v1/workflows/"+name, def); code >= 300 {
		return fmt.Errorf("store definition: %d %s", code, body)
	}
	fmt.Printf("stored %s; starting %d executions\n", name, n)
	ids := make([]string, n)
	for i := range n {
		code, body := call("POST", server+"/api/v1/workflows/"+name+"/executions", map[string]any{"input": map[string]any{"order": fmt.Sprintf("order-%d", i), "amount": 10 + i}})
		if code != http.StatusCreated {
			return fmt.Errorf("start execution: %d %s", code, body)
		}
		var started struct{ ID string }
		_ = json.Unmarshal(body, &started)
		ids[i] = started.ID
	}
	var got []pending
	for len(got) < n {
		select {
		case p := <-calls:
			got = append(got, p)
		case <-time.After(30 * time.Second):
			return fmt.Errorf("only %d of %d correlated calls arrived", len(got), n)
		}
	}
	rand.Shuffle(len(got), func(i, j int) { got[i], got[j] = got[j], got[i] })
	statuses := map[int]int{}
	for i, p := range got {
		times := 1 + rand.IntN(2) // some twice
		decision := "approved"
		if i%5 == 0 {
			decision = "rejected"
		}
		for range times {
			code, body := call("POST", server+"/api/internal/callbacks/approvals", map[string]any{
				"execution_id": p.Exec, "correlation_id": p.Corr, "decision": decision,
			})
			if code != http.StatusAccepted && code != http.StatusOK {
				return fmt.Errorf("callback: %d %s", code, body)
			}
			statuses[code]++
		}
	}
	fmt.Printf("callbacks answered: %d × 202 recorded, %d × 200 duplicate\n", statuses[202], statuses[200])
	deadline := time.Now().Add(60 * time.Second)
	for {
		completed := 0
		for _, id := range ids {
			_, body := call("GET", server+"/api/v1/executions/"+id, nil)
			var v struct{ Status string }
			_ = json.Unmarshal(body, &v)
			if v.Status == "completed" {
				completed++
			}
		}
		if completed == n {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d executions completed after 60 s", completed, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	once, other := 0, 0
	for i := range n {
		if notified[fmt.Sprintf("order-%d", i)] == 1 {
			once++
		} else {
			other++
		}
	}
	fmt.Printf("all %d executions completed; continuation ran exactly once for %d, not exactly once for %d\n", n, once, other)
	if other > 0 {
		return fmt.Errorf("exactly-once violated for %d executions", other)
	}
	return nil
}

func call(method, url string, body any) (int, []byte) {
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("Content-Type", "application/json")
	// A service with authentication on needs an admin token (the demo stores its
	// definition); `rendezvous dev` runs without on loopback and needs none.
	if token := os.Getenv("RENDEZVOUS_TOKEN"); token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}
